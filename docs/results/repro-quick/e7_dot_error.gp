# Made by `mixgrad repro`; run `gnuplot e7_dot_error.gp` in this folder to redraw.
set terminal pngcairo size 900,600 enhanced font 'sans,11'
set encoding utf8
set output "e7_dot_error.png"
set title "E7 dot-product error against length, f32 and f16 accumulation" noenhanced
set xlabel "k (terms summed)" noenhanced
set ylabel "mean |computed - exact| / sum |a b|" noenhanced
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
set autoscale xfix
set offsets graph 0.02, graph 0.02, 0, 0
set xtics ("64" 6, "256" 8, "1024" 10, "4096" 12, "16384" 14, "65536" 16) noenhanced
set logscale y 10
set yrange [6.4821497e-09:0.0288993509]
set format y "10^{%L}"
plot "e7_dot_error.dat" index 0 using 1:2 with lines ls 1 notitle, \
     "e7_dot_error.dat" index 0 using ($1-0.105):2 with points ls 1 notitle, \
     keyentry with linespoints ls 1 title "positive terms, f32 accumulation", \
     "e7_dot_error.dat" index 1 using 1:2 with lines ls 2 notitle, \
     "e7_dot_error.dat" index 1 using ($1-0.035):2 with points ls 2 notitle, \
     keyentry with linespoints ls 2 title "positive terms, f16 accumulation", \
     "e7_dot_error.dat" index 2 using 1:2 with lines ls 3 notitle, \
     "e7_dot_error.dat" index 2 using ($1+0.035):2 with points ls 3 notitle, \
     keyentry with linespoints ls 3 title "zero-mean terms, f32 accumulation", \
     "e7_dot_error.dat" index 3 using 1:2 with lines ls 4 notitle, \
     "e7_dot_error.dat" index 3 using ($1+0.105):2 with points ls 4 notitle, \
     keyentry with linespoints ls 4 title "zero-mean terms, f16 accumulation"
