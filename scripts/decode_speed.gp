# `turbokv decode-bench` tokens/s vs context length, one line per cache configuration.
#   -e "data='x.tsv'; configs='dense16 tq4 tq3'; model_title='...'; out='docs/x.png'"
# TSV columns: config, context, tokens_per_s, kv_bytes; one block per configuration, in the order
# of `configs`.
set terminal pngcairo size 900,600 font "DejaVu Sans,10" noenhanced
set output out
set datafile separator "\t"
set logscale x 2
set grid lc rgb "#dddddd"
set xlabel "context length (tokens in the cache)"
set ylabel "decode tokens per second"
set title model_title
set key top right
set yrange [0:*]
set offsets graph 0.05, graph 0.05, 0, 0
plot for [i = 1:words(configs)] data index (i - 1) using 2:3 with linespoints lw 2 pt 7 title word(configs, i)
