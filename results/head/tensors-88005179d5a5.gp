# qlab report: per-tensor weight error by layer, one line per tensor class.
# Data: tensors-88005179d5a5.dat. Redraw: gnuplot tensors-88005179d5a5.gp
set encoding utf8
set title 'head: Q4_0 (88005179d5a5) on stories260K'
set xlabel 'layer'
set ylabel 'RMSE of the weights'
set logscale y
set format y '%.0e'
set grid
set key outside right top
set xrange [-0.5:4.5]
set xtics 1
set terminal pngcairo size 960,600 font 'sans,11' noenhanced
set output 'tensors-88005179d5a5.png'
plot \
  'tensors-88005179d5a5.dat' index 0 using 1:2 with linespoints pt 7 lw 1.5 title 'attn_q', \
  'tensors-88005179d5a5.dat' index 1 using 1:2 with linespoints pt 7 lw 1.5 title 'attn_k', \
  'tensors-88005179d5a5.dat' index 2 using 1:2 with linespoints pt 7 lw 1.5 title 'attn_v', \
  'tensors-88005179d5a5.dat' index 3 using 1:2 with linespoints pt 7 lw 1.5 title 'attn_output', \
  'tensors-88005179d5a5.dat' index 4 using 1:2 with linespoints pt 7 lw 1.5 title 'ffn_gate', \
  'tensors-88005179d5a5.dat' index 5 using 1:2 with linespoints pt 7 lw 1.5 title 'ffn_up', \
  'tensors-88005179d5a5.dat' index 6 using 1:2 with linespoints pt 7 lw 1.5 title 'ffn_down'
set terminal svg size 960,600 font 'sans,11' noenhanced background rgb 'white'
set output 'tensors-88005179d5a5.svg'
replot
unset output
