# Made by `mixgrad train --inspect`; run `gnuplot inspect_lost.gp` in this folder to redraw.
set terminal pngcairo size 900,312 font "sans,10"
set termoption noenhanced
set output "inspect_lost.png"
set title "share of the updates lost (the stored value did not change)"
set xlabel "step"
set ylabel "layer"
set xtics ("1" 0, "26" 1, "51" 2, "76" 3, "101" 4, "126" 5, "151" 6, "176" 7, "201" 8, "226" 9, "251" 10, "276" 11)
set ytics ("0" 0, "3" 1, "7" 2, "9" 3)
set xrange [-0.5:11.5]
set yrange [-0.5:3.5]
set logscale cb
set cbrange [0.0001:1]
set cblabel "lost"
set palette defined (0 "#fff7ec", 1 "#fdd49e", 2 "#fc8d59", 3 "#d7301f", 4 "#7f0000")
set datafile missing NaN
plot "inspect_lost.dat" using 1:2:3 with image notitle
