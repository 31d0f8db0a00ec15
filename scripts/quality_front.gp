# Quality/size front of `turbokv eval`: bits per stored value vs mean KL(dense fp32 || config),
# one mark per configuration, one panel per model. Called by scripts/plots.sh with
#   -e "left='A.tsv'; left_title='...'; right='B.tsv'; right_title='...'; out='docs/x.png'"
# TSV columns: config, bits_per_value, kl, logit_cosine, family (0 dense, 1 TurboQuant, 2 baseline).
set terminal pngcairo size 1500,650 font "DejaVu Sans,10" noenhanced
set output out
set datafile separator "\t"
set multiplot layout 1,2
set logscale y
set format y "%.0e"
set grid xtics ytics mytics lc rgb "#dddddd"
set xlabel "bits per stored value (everything the cache holds)"
set ylabel "mean KL(dense fp32 || config), nats per token"
set key bottom left
set xrange [*:17.5]
fam(f, want) = (f == want) ? 1 : 0
do for [panel = 1:2] {
  file = panel == 1 ? left : right
  set title (panel == 1 ? left_title : right_title)
  plot file using 2:(fam($5,1) ? $3 : 1/0) with points pt 7 ps 1.3 lc rgb "#d62728" title "TurboQuant", \
       file using 2:(fam($5,2) ? $3 : 1/0) with points pt 5 ps 1.2 lc rgb "#1f77b4" title "baselines (llama.cpp, KIVI, mlx affine)", \
       file using 2:(fam($5,0) ? $3 : 1/0) with points pt 9 ps 1.3 lc rgb "#2ca02c" title "dense", \
       file using 2:3:1 with labels offset char 0.6,0.5 left font ",8" notitle
}
unset multiplot
