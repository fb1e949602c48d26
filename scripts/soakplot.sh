#!/usr/bin/env bash
# Plots the soak table `make soak` writes (internal/cmd/field -soak) with
# gnuplot: scripts/soakplot.sh docs/soak.tsv docs/soak.png. Four panels over
# the run's minutes: the workers' memory; their goroutines and file
# descriptors; their broker connections and the channels on them; the
# backlog (messages ready plus unpublished outbox rows) and the consumer lag.
set -Eeuo pipefail
tsv="${1:?usage: soakplot.sh TABLE.tsv OUT.png}"
png="${2:?usage: soakplot.sh TABLE.tsv OUT.png}"
command -v gnuplot >/dev/null || { echo "soakplot: gnuplot is not installed (make gnuplot)" >&2; exit 1; }
[ -s "$tsv" ] || { echo "soakplot: $tsv is empty or missing" >&2; exit 1; }
timeout 60 gnuplot <<GP
set terminal pngcairo size 1200,1000 font ",10"
set output "$png"
set datafile separator "\t"
set datafile missing "NaN"
set key autotitle columnhead top left
set grid
set xlabel "minutes"
set multiplot layout 4,1 title "make soak: the field's worker processes (sums over the six), sampled every bin"
set ylabel "MiB"
plot "$tsv" using 1:3 with lines lw 2 title "RSS"
set ylabel "count"
plot "$tsv" using 1:4 with lines lw 2 title "goroutines", "" using 1:5 with lines lw 2 title "file descriptors"
plot "$tsv" using 1:6 with lines lw 2 title "AMQP connections", "" using 1:7 with lines lw 2 title "channels (broker's count)"
set ylabel "messages"
set y2label "seconds"
set y2tics
plot "$tsv" using 1:8 with lines lw 2 title "backlog (ready + outbox rows)", "" using 1:9 axes x1y2 with lines lw 2 title "consumer lag (s, right)"
unset multiplot
GP
echo "soakplot: $png"
