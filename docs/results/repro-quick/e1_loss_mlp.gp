# Made by `mixgrad repro`; run `gnuplot e1_loss_mlp.gp` in this folder to redraw.
set terminal pngcairo size 900,540 noenhanced font 'sans,11'
set output "e1_loss_mlp.png"
set title "E1 training loss, MLP"
set xlabel "step"
set ylabel "training loss (batch)"
set grid
set key outside right top
set logscale y 10
plot "e1_loss_mlp.dat" index 0 using 1:2 with lines lw 2 title "V0 fp32", \
     "e1_loss_mlp.dat" index 1 using 1:2 with lines lw 2 title "V2 float16_master", \
     "e1_loss_mlp.dat" index 2 using 1:2 with lines lw 2 title "V3 float16_master_S1024", \
     "e1_loss_mlp.dat" index 3 using 1:2 with lines lw 2 title "V4 float16_dynamic", \
     "e1_loss_mlp.dat" index 4 using 1:2 with lines lw 2 title "V5 mixed_bfloat16"
