# qlab report: kld_mean against bits per weight, one series per activation mode;
# the dashed line joins the Pareto front (configs no other config beats on
# both). Data: formats.dat, pareto_kld.dat. Redraw: gnuplot kld_bpw.gp
set encoding utf8
set title 'formats: synth:dim=512,ff=1536,layers=4,heads=8,kv-heads=4 on tinystories-valid, ctx 256, 24 chunks'
set xlabel 'bits per weight'
set ylabel 'mean KL divergence to the reference (nats)'
set grid
set key top right
set pointsize 1.3
set logscale y
set format y '%.0e'
set offsets graph 0.05, graph 0.05, graph 0.08, graph 0.05
set terminal pngcairo size 960,600 font 'sans,11' noenhanced
set output 'kld_bpw.png'
plot \
  'formats.dat' index 0 using 1:2 with points pt 7 lc 1 title 'act f32', \
  'pareto_kld.dat' using 1:2 with lines dt 2 lw 1.5 lc rgb 'black' title 'Pareto front', \
  'pareto_kld.dat' using 1:2 with points pt 6 ps 2.4 lc rgb 'black' notitle, \
  'pareto_kld.dat' using 1:2:3 with labels offset char 0,1.3 font ',9' notitle
set terminal svg size 960,600 font 'sans,11' noenhanced background rgb 'white'
set output 'kld_bpw.svg'
replot
unset output
