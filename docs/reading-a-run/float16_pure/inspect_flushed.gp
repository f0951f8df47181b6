# Made by `mixgrad train --inspect`; run `gnuplot inspect_flushed.gp` in this folder to redraw.
set terminal pngcairo size 900,984 font "sans,10"
set termoption noenhanced
set output "inspect_flushed.png"
set title "share flushed to zero in f16, per layer and inspected step"
set xlabel "step"
set ylabel "layer"
set xtics ("1" 0, "26" 1, "51" 2, "76" 3, "101" 4, "126" 5, "151" 6, "176" 7, "201" 8, "226" 9, "251" 10, "276" 11)
set ytics ("0 activation" 0, "1 activation" 1, "2 activation" 2, "3 activation" 3, "4 activation" 4, "5 activation" 5, "6 activation" 6, "7 activation" 7, "8 activation" 8, "9 activation" 9, "0 activation_grad" 10, "1 activation_grad" 11, "2 activation_grad" 12, "3 activation_grad" 13, "4 activation_grad" 14, "5 activation_grad" 15, "6 activation_grad" 16, "7 activation_grad" 17, "8 activation_grad" 18, "9 activation_grad" 19, "0 weight_grad" 20, "3 weight_grad" 21, "7 weight_grad" 22, "9 weight_grad" 23, "0 update" 24, "3 update" 25, "7 update" 26, "9 update" 27)
set xrange [-0.5:11.5]
set yrange [-0.5:27.5]
set logscale cb
set cbrange [0.0001:1]
set cblabel "flushed in f16"
set palette defined (0 "#fff7ec", 1 "#fdd49e", 2 "#fc8d59", 3 "#d7301f", 4 "#7f0000")
set datafile missing NaN
plot "inspect_flushed.dat" using 1:2:3 with image notitle
