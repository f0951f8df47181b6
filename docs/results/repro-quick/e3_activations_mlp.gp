# Made by `mixgrad repro`; run `gnuplot e3_activations_mlp.gp` in this folder to redraw.
set terminal pngcairo size 900,600 enhanced font 'sans,11'
set encoding utf8
set output "e3_activations_mlp.png"
set title "E3 MLP layer-output gradients (fp32), with f16's ranges" noenhanced
set xlabel "log2 |g|" noenhanced
set ylabel "fraction of values" noenhanced
set key below center horizontal reverse Left noenhanced samplen 4 height 1
set grid
set style line 1 lc rgb "#000000" dt 1 lw 2 pt 6 ps 1.3
set style line 2 lc rgb "#E69F00" dt 2 lw 2 pt 4 ps 1.3
set style line 3 lc rgb "#0072B2" dt 3 lw 2 pt 8 ps 1.3
set style line 4 lc rgb "#009E73" dt 4 lw 2 pt 12 ps 1.3
set style line 5 lc rgb "#CC79A7" dt 5 lw 2 pt 10 ps 1.3
set style line 6 lc rgb "#D55E00" dt (14,6) lw 2 pt 2 ps 1.3
set style line 7 lc rgb "#56B4E9" dt (4,4,12,4) lw 2 pt 1 ps 1.3
set style line 8 lc rgb "#882255" dt (8,3,2,3) lw 2 pt 3 ps 1.3
set style line 9 lc rgb "#7F7F7F" dt (2,6) lw 2 pt 14 ps 1.3
set style line 10 lc rgb "#332288" dt (10,4) lw 2 pt 5 ps 1.3
set style line 11 lc rgb "#117733" dt (2,3) lw 2 pt 9 ps 1.3
set style line 12 lc rgb "#AA4499" dt (12,3,3,3) lw 2 pt 11 ps 1.3
set style line 13 lc rgb "#44AA99" dt (6,2) lw 2 pt 13 ps 1.3
set style line 14 lc rgb "#999933" dt (3,3,3,9) lw 2 pt 15 ps 1.3
set style line 15 lc rgb "#661100" dt (16,4,4,4) lw 2 pt 7 ps 1.3
set style line 16 lc rgb "#6699CC" dt (8,8) lw 2 pt 1 ps 1.3
set style line 17 lc rgb "#CC6677" dt (1,2,8,2) lw 2 pt 3 ps 1.3
set xrange [-40:18]
set xtics ("≤ -40" -40, "-32" -32, "-24" -24, "-16" -16, "-8" -8, "0" 0, "8" 8, "≥ 16" 16) noenhanced
set logscale y 10
set yrange [1.18702956e-06:0.677320876]
set format y "10^{%L}"
set object 1 rect from -40, graph 0 to -24, graph 1 behind fc rgb "#d62728" fs transparent solid 0.18 noborder
set label 1 "lost in f16 (< 2^-24)" at -32, graph 0.965 center font 'sans,9' noenhanced
set object 2 rect from -24, graph 0 to -14, graph 1 behind fc rgb "#ff7f0e" fs transparent solid 0.18 noborder
set label 2 "f16 subnormal" at -19, graph 0.92 center font 'sans,9' noenhanced
set object 3 rect from -14, graph 0 to 15.9992954, graph 1 behind fc rgb "#2ca02c" fs transparent solid 0.18 noborder
set label 3 "f16 normal" at 0.999647694, graph 0.965 center font 'sans,9' noenhanced
set object 4 rect from 15.9992954, graph 0 to 18, graph 1 behind fc rgb "#7f7f7f" fs transparent solid 0.18 noborder
set label 4 "inf" at 16.9996477, graph 0.92 center font 'sans,9' noenhanced
plot "e3_activations_mlp.dat" index 0 using 1:2 with histeps ls 1 title "5 Linear [64, 10]", \
     "e3_activations_mlp.dat" index 1 using 1:2 with histeps ls 2 title "4 ReLU [64, 256]", \
     "e3_activations_mlp.dat" index 2 using 1:2 with histeps ls 3 title "3 Linear [64, 256]", \
     "e3_activations_mlp.dat" index 3 using 1:2 with histeps ls 4 title "2 ReLU [64, 256]", \
     "e3_activations_mlp.dat" index 4 using 1:2 with histeps ls 5 title "1 Linear [64, 256]"
