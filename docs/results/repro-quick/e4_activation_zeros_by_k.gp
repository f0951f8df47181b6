# Made by `mixgrad repro`; run `gnuplot e4_activation_zeros_by_k.gp` in this folder to redraw.
set terminal pngcairo size 900,540 noenhanced font 'sans,11'
set output "e4_activation_zeros_by_k.png"
set title "E4 activation gradients exactly zero"
set xlabel "k"
set ylabel "zero activation gradients (%)"
set grid
set key outside right top
plot "e4_activation_zeros_by_k.dat" index 0 using 1:2 with linespoints lw 2 title "V0 fp32", \
     "e4_activation_zeros_by_k.dat" index 1 using 1:2 with linespoints lw 2 title "V2 float16_master", \
     "e4_activation_zeros_by_k.dat" index 2 using 1:2 with linespoints lw 2 title "V3 float16_master S=2^k", \
     "e4_activation_zeros_by_k.dat" index 3 using 1:2 with linespoints lw 2 title "V4 float16_dynamic", \
     "e4_activation_zeros_by_k.dat" index 4 using 1:2 with linespoints lw 2 title "V5 mixed_bfloat16"
