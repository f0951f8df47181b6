# Made by `mixgrad repro`; run `gnuplot e2_accuracy_decaying.gp` in this folder to redraw.
set terminal pngcairo size 900,540 noenhanced font 'sans,11'
set output "e2_accuracy_decaying.png"
set title "E2 test accuracy, cosine lr 0.003 to 3e-05"
set xlabel "step"
set ylabel "test accuracy (%)"
set grid
set key outside right top
plot "e2_accuracy_decaying.dat" index 0 using 1:2 with linespoints lw 2 title "V0 fp32", \
     "e2_accuracy_decaying.dat" index 1 using 1:2 with linespoints lw 2 title "V1 float16_pure", \
     "e2_accuracy_decaying.dat" index 2 using 1:2 with linespoints lw 2 title "V2 float16_master", \
     "e2_accuracy_decaying.dat" index 3 using 1:2 with linespoints lw 2 title "V5 mixed_bfloat16", \
     "e2_accuracy_decaying.dat" index 4 using 1:2 with linespoints lw 2 title "V6 bfloat16_pure"
