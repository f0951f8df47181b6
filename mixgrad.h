// mixgrad: everything a program needs, in one include.
#pragma once

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "core/factory.h"
#include "core/format.h"
#include "core/generator.h"
#include "core/tensor.h"
