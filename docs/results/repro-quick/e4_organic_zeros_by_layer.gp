# Made by `mixgrad repro`; run `gnuplot e4_organic_zeros_by_layer.gp` in this folder to redraw.
set terminal pngcairo size 900,540 noenhanced font 'sans,11'
set output "e4_organic_zeros_by_layer.png"
set title "E4 organic: weight-gradient values that are zero, by layer"
set xlabel "layer (1 = first)"
set ylabel "zero gradient values (%)"
set grid
set key outside right top
plot "e4_organic_zeros_by_layer.dat" index 0 using 1:2 with linespoints lw 2 title "V0 fp32", \
     "e4_organic_zeros_by_layer.dat" index 1 using 1:2 with linespoints lw 2 title "V0 fp32 (zero once in f16)", \
     "e4_organic_zeros_by_layer.dat" index 2 using 1:2 with linespoints lw 2 title "V2 float16_master", \
     "e4_organic_zeros_by_layer.dat" index 3 using 1:2 with linespoints lw 2 title "V4 float16_dynamic"
