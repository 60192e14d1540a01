# qlab report: per-tensor weight error by layer, one line per tensor class.
# Data: tensors-2fad29d78c0e.dat. Redraw: gnuplot tensors-2fad29d78c0e.gp
set encoding utf8
set title 'activations-synth: Q4_K act=native KV=f16 (2fad29d78c0e) on synth:dim=512,ff=1536,layers=4,heads=8,kv-heads=4'
set xlabel 'layer'
set ylabel 'RMSE of the weights'
set format y '%.2e'
set grid
set key outside right top
set xrange [-0.5:3.5]
set xtics 1
set terminal pngcairo size 960,600 font 'sans,11' noenhanced
set output 'tensors-2fad29d78c0e.png'
plot \
  'tensors-2fad29d78c0e.dat' index 0 using 1:2 with linespoints pt 7 lw 1.5 title 'attn_q', \
  'tensors-2fad29d78c0e.dat' index 1 using 1:2 with linespoints pt 7 lw 1.5 title 'attn_k', \
  'tensors-2fad29d78c0e.dat' index 2 using 1:2 with linespoints pt 7 lw 1.5 title 'attn_v', \
  'tensors-2fad29d78c0e.dat' index 3 using 1:2 with linespoints pt 7 lw 1.5 title 'attn_output', \
  'tensors-2fad29d78c0e.dat' index 4 using 1:2 with linespoints pt 7 lw 1.5 title 'ffn_gate', \
  'tensors-2fad29d78c0e.dat' index 5 using 1:2 with linespoints pt 7 lw 1.5 title 'ffn_up', \
  'tensors-2fad29d78c0e.dat' index 6 using 1:2 with linespoints pt 7 lw 1.5 title 'ffn_down'
set terminal svg size 960,600 font 'sans,11' noenhanced background rgb 'white'
set output 'tensors-2fad29d78c0e.svg'
replot
unset output
