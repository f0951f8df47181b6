# Made by `mixgrad repro`; run `gnuplot e1_scale_mlp.gp` in this folder to redraw.
set terminal pngcairo size 900,540 noenhanced font 'sans,11'
set output "e1_scale_mlp.png"
set title "E1 loss scale, MLP (skipped steps marked)"
set xlabel "step"
set ylabel "loss scale"
set grid
set key outside right top
set logscale y 10
plot "e1_scale_mlp.dat" index 0 using 1:2 with lines lw 2 title "V3 float16_master_S1024 scale", \
     "e1_scale_mlp.dat" index 1 using 1:2 with lines lw 2 title "V4 float16_dynamic scale"
