# Made by `mixgrad repro`; run `gnuplot e11_gradient_exponents.gp` in this folder to redraw.
set terminal pngcairo size 900,600 enhanced font 'sans,11'
set encoding utf8
set output "e11_gradient_exponents.png"
set title "E11 Linear output gradients: binades below their tensor's amax (per-tensor scaling)" noenhanced
set xlabel "log2(|g| / amax of its tensor)" noenhanced
set ylabel "share of the non-zero values" noenhanced
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
set xrange [-40:0]
set yrange [-0.00412607539:0.0973753793]
set object 1 rect from -40, graph 0 to -32.8073549, graph 1 behind fc rgb "#d62728" fs transparent solid 0.18 noborder
set label 1 "both flush" at -36.4036775, graph 0.965 center font 'sans,9' noenhanced
set object 2 rect from -32.8073549, graph 0 to -29.8073549, graph 1 behind fc rgb "#ff7f0e" fs transparent solid 0.18 noborder
set label 2 "E5M2 subnormal" at -31.3073549, graph 0.92 center font 'sans,9' noenhanced
set object 3 rect from -29.8073549, graph 0 to -18.8073549, graph 1 behind fc rgb "#e377c2" fs transparent solid 0.18 noborder
set label 3 "E4M3 flushes" at -24.3073549, graph 0.965 center font 'sans,9' noenhanced
set object 4 rect from -18.8073549, graph 0 to -14.8073549, graph 1 behind fc rgb "#ff7f0e" fs transparent solid 0.18 noborder
set label 4 "E4M3 subnormal" at -16.8073549, graph 0.92 center font 'sans,9' noenhanced
set object 5 rect from -14.8073549, graph 0 to 0, graph 1 behind fc rgb "#2ca02c" fs transparent solid 0.18 noborder
set label 5 "both normal" at -7.40367746, graph 0.965 center font 'sans,9' noenhanced
plot "e11_gradient_exponents.dat" index 0 using 1:2 with histeps ls 1 title "MLP, all Linear output gradients", \
     "e11_gradient_exponents.dat" index 1 using 1:2 with histeps ls 2 title "char LSTM, all Linear output gradients"
