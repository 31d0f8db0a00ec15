# `turbokv attention-bench` per-layer decode attention time vs context: fp16, dequantize-then-
# attend and fused, per TurboQuant width.
#   -e "data='x.tsv'; widths='2 3 4'; shape_title='...'; out='docs/x.png'"
# TSV columns: bits, context, fp16_ms, dequant_ms, fused_ms.
set terminal pngcairo size 900,600 font "DejaVu Sans,10" noenhanced
set output out
set datafile separator "\t"
set logscale xy
set grid lc rgb "#dddddd"
set xlabel "context length (tokens)"
set ylabel "attention time per layer and decode step (ms)"
set title shape_title
set key top left
first = word(widths, words(widths))
plot data using (strcol(1) eq first ? $2 : 1/0):3 with linespoints lw 2 pt 5 lc rgb "black" title "fp16 dense", \
     for [i = 1:words(widths)] data using (strcol(1) eq word(widths, i) ? $2 : 1/0):4 with linespoints dt 2 lw 2 pt 6 lc i title sprintf("%s-bit dequantize-then-attend", word(widths, i)), \
     for [i = 1:words(widths)] data using (strcol(1) eq word(widths, i) ? $2 : 1/0):5 with linespoints lw 2 pt 7 lc i title sprintf("%s-bit fused", word(widths, i))
