// MG_EMU_ASAN: defined when the build runs under AddressSanitizer (GCC's or clang's), with its
// interface: the emulator tells it about fiber switches (fiber.cpp) and which device and shared
// memory may be touched (memory.cpp).
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define MG_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MG_EMU_ASAN 1
#endif
#endif

#ifdef MG_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
