# Made by `mixgrad repro`; run `gnuplot e5_scale_lstm.gp` in this folder to redraw.
set terminal pngcairo size 900,540 noenhanced font 'sans,11'
set output "e5_scale_lstm.png"
set title "E5 char LSTM loss scale (skipped steps marked)"
set xlabel "step"
set ylabel "loss scale"
set grid
set key outside right top
set logscale y 10
plot "e5_scale_lstm.dat" index 0 using 1:2 with lines lw 2 title "V3 float16_master_S128 scale", \
     "e5_scale_lstm.dat" index 1 using 1:2 with lines lw 2 title "V4 float16_dynamic scale"
