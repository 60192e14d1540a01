# qlab report: per-tensor weight error by layer, one line per tensor class.
# Data: tensors-14f2894fa742.dat. Redraw: gnuplot tensors-14f2894fa742.gp
set encoding utf8
set title 'seed-int8: Q8_0 act=q8_0 (14f2894fa742) on synth:dim=512,ff=1536,layers=4,heads=8,kv-heads=4'
set xlabel 'layer'
set ylabel 'relative imatrix-weighted error'
set logscale y
set format y '%.0e'
set grid
set key outside right top
set xrange [-0.5:3.5]
set xtics 1
set terminal pngcairo size 960,600 font 'sans,11' noenhanced
set output 'tensors-14f2894fa742.png'
plot \
  'tensors-14f2894fa742.dat' index 0 using 1:2 with linespoints pt 7 lw 1.5 title 'attn_q', \
  'tensors-14f2894fa742.dat' index 1 using 1:2 with linespoints pt 7 lw 1.5 title 'attn_k', \
  'tensors-14f2894fa742.dat' index 2 using 1:2 with linespoints pt 7 lw 1.5 title 'attn_v', \
  'tensors-14f2894fa742.dat' index 3 using 1:2 with linespoints pt 7 lw 1.5 title 'attn_output', \
  'tensors-14f2894fa742.dat' index 4 using 1:2 with linespoints pt 7 lw 1.5 title 'ffn_gate', \
  'tensors-14f2894fa742.dat' index 5 using 1:2 with linespoints pt 7 lw 1.5 title 'ffn_up', \
  'tensors-14f2894fa742.dat' index 6 using 1:2 with linespoints pt 7 lw 1.5 title 'ffn_down'
set terminal svg size 960,600 font 'sans,11' noenhanced background rgb 'white'
set output 'tensors-14f2894fa742.svg'
replot
unset output
