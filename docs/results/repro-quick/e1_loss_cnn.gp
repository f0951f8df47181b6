# Made by `mixgrad repro`; run `gnuplot e1_loss_cnn.gp` in this folder to redraw.
set terminal pngcairo size 900,540 noenhanced font 'sans,11'
set output "e1_loss_cnn.png"
set title "E1 training loss, CNN"
set xlabel "step"
set ylabel "training loss (batch)"
set grid
set key outside right top
set logscale y 10
plot "e1_loss_cnn.dat" index 0 using 1:2 with lines lw 2 title "V0 fp32", \
     "e1_loss_cnn.dat" index 1 using 1:2 with lines lw 2 title "V2 float16_master", \
     "e1_loss_cnn.dat" index 2 using 1:2 with lines lw 2 title "V3 float16_master_S1024", \
     "e1_loss_cnn.dat" index 3 using 1:2 with lines lw 2 title "V4 float16_dynamic", \
     "e1_loss_cnn.dat" index 4 using 1:2 with lines lw 2 title "V5 mixed_bfloat16"
