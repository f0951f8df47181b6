# Made by `mixgrad repro`; run `gnuplot e3_activations_cnn.gp` in this folder to redraw.
set terminal pngcairo size 900,540 noenhanced font 'sans,11'
set output "e3_activations_cnn.png"
set title "E3 CNN activation gradients (fp32), with f16's ranges"
set xlabel "log2 |g|"
set ylabel "fraction of values"
set grid
set key outside right top
set logscale y 10
set xrange [-40:17]
set object 1 rect from -40, graph 0 to -24, graph 1 behind fc rgb "#d62728" fs transparent solid 0.18 noborder
set label 1 "lost in f16 (< 2^-24)" at -32, graph 0.96 center font 'sans,9'
set object 2 rect from -24, graph 0 to -14, graph 1 behind fc rgb "#ff7f0e" fs transparent solid 0.18 noborder
set label 2 "f16 subnormal" at -19, graph 0.96 center font 'sans,9'
set object 3 rect from -14, graph 0 to 16, graph 1 behind fc rgb "#2ca02c" fs transparent solid 0.18 noborder
set label 3 "f16 normal" at 1, graph 0.96 center font 'sans,9'
set object 4 rect from 16, graph 0 to 17, graph 1 behind fc rgb "#7f7f7f" fs transparent solid 0.18 noborder
set label 4 "inf" at 16.5, graph 0.96 center font 'sans,9'
plot "e3_activations_cnn.dat" index 0 using 1:2 with histeps lw 2 title "relu [64, 64]", \
     "e3_activations_cnn.dat" index 1 using 1:2 with histeps lw 2 title "add [64, 64]", \
     "e3_activations_cnn.dat" index 2 using 1:2 with histeps lw 2 title "relu [64, 16, 14, 14]", \
     "e3_activations_cnn.dat" index 3 using 1:2 with histeps lw 2 title "im2col [12544, 72]", \
     "e3_activations_cnn.dat" index 4 using 1:2 with histeps lw 2 title "max_pool2d [64, 8, 14, 14]", \
     "e3_activations_cnn.dat" index 5 using 1:2 with histeps lw 2 title "relu [64, 8, 28, 28]"
