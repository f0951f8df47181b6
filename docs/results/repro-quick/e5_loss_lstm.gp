# Made by `mixgrad repro`; run `gnuplot e5_loss_lstm.gp` in this folder to redraw.
set terminal pngcairo size 900,540 noenhanced font 'sans,11'
set output "e5_loss_lstm.png"
set title "E5 char LSTM training loss (batch mean, nats)"
set xlabel "step"
set ylabel "loss"
set grid
set key outside right top
plot "e5_loss_lstm.dat" index 0 using 1:2 with lines lw 2 title "V0 fp32", \
     "e5_loss_lstm.dat" index 1 using 1:2 with lines lw 2 title "V2 float16_master", \
     "e5_loss_lstm.dat" index 2 using 1:2 with lines lw 2 title "V3 float16_master_S128", \
     "e5_loss_lstm.dat" index 3 using 1:2 with lines lw 2 title "V4 float16_dynamic", \
     "e5_loss_lstm.dat" index 4 using 1:2 with lines lw 2 title "V5 mixed_bfloat16"
