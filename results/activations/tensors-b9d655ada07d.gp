# qlab report: per-tensor weight error by layer, one line per tensor class.
# Data: tensors-b9d655ada07d.dat. Redraw: gnuplot tensors-b9d655ada07d.gp
set encoding utf8
set title 'activations: Q4_0 act=native KV=f16 (b9d655ada07d) on stories260K'
set xlabel 'layer'
set ylabel 'RMSE of the weights'
set logscale y
set format y '%.0e'
set grid
set key outside right top
set xrange [-0.5:4.5]
set xtics 1
set terminal pngcairo size 960,600 font 'sans,11' noenhanced
set output 'tensors-b9d655ada07d.png'
plot \
  'tensors-b9d655ada07d.dat' index 0 using 1:2 with linespoints pt 7 lw 1.5 title 'attn_q', \
  'tensors-b9d655ada07d.dat' index 1 using 1:2 with linespoints pt 7 lw 1.5 title 'attn_k', \
  'tensors-b9d655ada07d.dat' index 2 using 1:2 with linespoints pt 7 lw 1.5 title 'attn_v', \
  'tensors-b9d655ada07d.dat' index 3 using 1:2 with linespoints pt 7 lw 1.5 title 'attn_output', \
  'tensors-b9d655ada07d.dat' index 4 using 1:2 with linespoints pt 7 lw 1.5 title 'ffn_gate', \
  'tensors-b9d655ada07d.dat' index 5 using 1:2 with linespoints pt 7 lw 1.5 title 'ffn_up', \
  'tensors-b9d655ada07d.dat' index 6 using 1:2 with linespoints pt 7 lw 1.5 title 'ffn_down'
set terminal svg size 960,600 font 'sans,11' noenhanced background rgb 'white'
set output 'tensors-b9d655ada07d.svg'
replot
unset output
