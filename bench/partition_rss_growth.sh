#!/usr/bin/env bash
# Peak RSS of the vertex-cut partitioners as edges grow 4x at a fixed number of nodes
# (R-MAT 1M nodes, 5M vs 20M generated edges; graphs built by `bench/partition.py`).
# Writes bench/results/partition_rss_growth.md. Usage: bash bench/partition_rss_growth.sh
set -euo pipefail
cd "$(dirname "$0")/.."
graphs=bench/work/partition/graphs
out=bench/results/partition_rss_growth.md
{
  echo "# Vertex-cut partitioners: peak RSS as edges grow 4x (p = 8)"
  echo
  echo "Command: \`bash bench/partition_rss_growth.sh\` ($(date -u +%Y-%m-%d), $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg))."
  echo "Each run: \`/usr/bin/time -v shoal partition GRAPH --algo A --parts 8 --json F\` (whole process)."
  echo
  echo "| algorithm | rmat_1m_5m peak RSS MiB | rmat_1m_20m peak RSS MiB | growth |"
  echo "|---|---|---|---|"
  for a in hdrf dbh greedy 2ps-l; do
    r=()
    for g in rmat_1m_5m rmat_1m_20m; do
      kb=$( { /usr/bin/time -v .venv/bin/shoal partition "$graphs/$g" --algo "$a" --parts 8 \
              --json /dev/null > /dev/null; } 2>&1 | awk -F': ' '/Maximum resident/ {print $2}')
      r+=("$kb")
    done
    awk -v a="$a" -v x="${r[0]}" -v y="${r[1]}" \
      'BEGIN { printf "| %s | %.0f | %.0f | %.2fx |\n", a, x/1024, y/1024, y/x }'
  done
} > "$out"
cat "$out"
