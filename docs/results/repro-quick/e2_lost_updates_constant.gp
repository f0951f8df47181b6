# Made by `mixgrad repro`; run `gnuplot e2_lost_updates_constant.gp` in this folder to redraw.
set terminal pngcairo size 900,540 noenhanced font 'sans,11'
set output "e2_lost_updates_constant.png"
set title "E2 fraction of updates lost, constant lr 0.001"
set xlabel "step"
set ylabel "lost updates (fraction of elements)"
set grid
set key outside right top
plot "e2_lost_updates_constant.dat" index 0 using 1:2 with lines lw 2 title "V0 fp32", \
     "e2_lost_updates_constant.dat" index 1 using 1:2 with lines lw 2 title "V1 float16_pure", \
     "e2_lost_updates_constant.dat" index 2 using 1:2 with lines lw 2 title "V2 float16_master", \
     "e2_lost_updates_constant.dat" index 3 using 1:2 with lines lw 2 title "V5 mixed_bfloat16", \
     "e2_lost_updates_constant.dat" index 4 using 1:2 with lines lw 2 title "V6 bfloat16_pure"
