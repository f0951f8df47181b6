# Made by `mixgrad repro`; run `gnuplot e6_speed_memory.gp` in this folder to redraw.
set terminal pngcairo size 900,540 noenhanced font 'sans,11'
set output "e6_speed_memory.png"
set title "E6 speed and memory (activations + state) relative to fp32"
set xlabel "variant (V0..V6)"
set ylabel "relative to fp32"
set grid
set key outside right top
plot "e6_speed_memory.dat" index 0 using 1:2 with linespoints lw 2 title "CNN speed", \
     "e6_speed_memory.dat" index 1 using 1:2 with linespoints lw 2 title "CNN memory"
