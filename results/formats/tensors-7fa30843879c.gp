# qlab report: per-tensor weight error by layer, one line per tensor class.
# Data: tensors-7fa30843879c.dat. Redraw: gnuplot tensors-7fa30843879c.gp
set encoding utf8
set title 'formats: TQ1_0 (7fa30843879c) on synth:dim=512,ff=1536,layers=4,heads=8,kv-heads=4'
set xlabel 'layer'
set ylabel 'relative imatrix-weighted error'
set format y '%.2e'
set grid
set key outside right top
set xrange [-0.5:3.5]
set xtics 1
set terminal pngcairo size 960,600 font 'sans,11' noenhanced
set output 'tensors-7fa30843879c.png'
plot \
  'tensors-7fa30843879c.dat' index 0 using 1:2 with linespoints pt 7 lw 1.5 title 'attn_q', \
  'tensors-7fa30843879c.dat' index 1 using 1:2 with linespoints pt 7 lw 1.5 title 'attn_k', \
  'tensors-7fa30843879c.dat' index 2 using 1:2 with linespoints pt 7 lw 1.5 title 'attn_v', \
  'tensors-7fa30843879c.dat' index 3 using 1:2 with linespoints pt 7 lw 1.5 title 'attn_output', \
  'tensors-7fa30843879c.dat' index 4 using 1:2 with linespoints pt 7 lw 1.5 title 'ffn_gate', \
  'tensors-7fa30843879c.dat' index 5 using 1:2 with linespoints pt 7 lw 1.5 title 'ffn_up', \
  'tensors-7fa30843879c.dat' index 6 using 1:2 with linespoints pt 7 lw 1.5 title 'ffn_down'
set terminal svg size 960,600 font 'sans,11' noenhanced background rgb 'white'
set output 'tensors-7fa30843879c.svg'
replot
unset output
