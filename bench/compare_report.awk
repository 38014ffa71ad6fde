# The report of bench/compare.sh: the anchor table, the throughput table with ratios and targets, bfloat16
# against its float32 twin, and peak memory, from the raw result lines ("side/allocator workload threads
# samples_per_s max_rss_mb cpu_ms_per_step"). Variables: workloads, thread_counts, reps, allocators, anchors_file.
# Note: a separate file so that ctest can run it on a fixture with the machine's awk (Debian's mawk): a report
# that does not parse would otherwise only show at the end of a 20-minute quiet run.
function sort_list(list, values,   n, i, j, t) {
  n = split(list, values, " ")
  for (i = 2; i <= n; ++i) for (j = i; j > 1 && values[j - 1] + 0 > values[j] + 0; --j) {
    t = values[j]; values[j] = values[j - 1]; values[j - 1] = t
  }
  return n
}
function median(list,   values, n) {
  n = sort_list(list, values)
  if (n == 0) return 0
  return n % 2 ? values[(n + 1) / 2] : (values[n / 2] + values[n / 2 + 1]) / 2
}
function spread(list,   values, n) {
  n = sort_list(list, values)
  return n ? sprintf("%.4g..%.4g", values[1], values[n]) : "-"
}
BEGIN {
  while ((getline line < anchors_file) > 0) {
    if (line ~ /^anchor=/) {
      split(line, f, " "); sub("anchor=", "", f[1]); sub("threads=", "", f[2]); sub("gflops=", "", f[3])
      anchor[f[1], f[2]] = anchor[f[1], f[2]] " " f[3]; anchor_names[f[1]] = 1
      if (f[1] ~ /^fma_peak/) peak_name = f[1]
    }
  }
  # floating-point operations per sample (per step for matmul), from the layer shapes (bench/compare.cpp)
  flops["mlp"] = 3209216; flops["infer_mlp_b1"] = 1337344; flops["infer_mlp_b1024"] = 1337344
  flops["cnn"] = 24995328; flops["resnet"] = 834026496; flops["matmul"] = 2147483648
  flops["cnn_cl"] = flops["cnn"]; flops["resnet_cl"] = flops["resnet"]  # the same models channels-last
  # lstm: per step and layer 2 * 4H * (I + H) forward (28 steps; H 256, I 28 then 256) plus the head;
  # training = forward + weight gradient + input gradient without layer 0 input part (28 * 2 * 4H * 28)
  flops["lstm"] = 135347200; flops["lstm_infer_b1"] = 45650944
  # transformer, per sequence of 128 tokens: per token and layer 2 * (3E^2 + E^2 + 2 E F) projections and
  # feed-forward plus 2 * 2 * T * E for q kT and the weights times v (E 256, F 1024, T 128; the whole T x T,
  # as an unmasked attention multiplies: the causal half is not discounted), 4 layers, plus the head 2 * E * 96;
  # training = 3 x forward (the input and weight gradients of each GEMM), embeddings not counted
  flops["transformer"] = 2636120064
  target["lstm"] = 1.3; target["lstm_infer_b1"] = 1.2; target["transformer"] = 1.3
  target["mlp"] = 1.05; target["cnn"] = 2.0; target["bn_fwd_bwd"] = 3.0; target["infer_mlp_b1"] = 1.1
  target["infer_mlp_b1024"] = 1.05
  # bfloat16 autocast (bench/compare_autocast.h): the same products as their float32 twins; the "of FMA peak"
  # column is still against the float32 peak. Targets (issue 42): >= 1.3x libtorch under CPU autocast here, and
  # against the float32 twin of tapegrad itself in the table after this one.
  flops["matmul_bf16"] = flops["matmul"]; flops["mlp_bf16"] = flops["mlp"]; flops["cnn_bf16"] = flops["cnn"]
  flops["resnet_bf16"] = flops["resnet"]
  flops["cnn_bf16_cl"] = flops["cnn"]; flops["resnet_bf16_cl"] = flops["resnet"]  # autocast + channels-last
  target["mlp_bf16"] = 1.3; target["cnn_bf16"] = 1.3; target["resnet_bf16"] = 1.3
  own_target["matmul_bf16"] = 1.7; own_target["mlp_bf16"] = 1.3; own_target["cnn_bf16"] = 1.3
  own_target["resnet_bf16"] = 1.3
  # Note: both switches at once, against tapegrad's default float32 (row-major) model.
  own_target["cnn_bf16_cl"] = 1.3; own_target["resnet_bf16_cl"] = 1.3; twin_of["cnn_bf16_cl"] = "cnn"
  twin_of["resnet_bf16_cl"] = "resnet"; target["cnn_bf16_cl"] = 1.3; target["resnet_bf16_cl"] = 1.3
  target["resnet_cl"] = 1.4  # issue 42 (cnn_cl: >= 62% of the FMA peak at 1 thread, the "of FMA peak" column)
}
{ key = $1 SUBSEP $2 SUBSEP $3; speed[key] = speed[key] " " $4; rss[key] = rss[key] " " $5 }
END {
  n_threads = split(thread_counts, threads_list, " ")
  n_workloads = split(workloads, workload_list, " ")
  n_alloc = split(allocators, alloc_list, " ")
  printf "Anchors (GFLOP/s, medians of the runs before and after; 1024^3 GEMMs):\n\n| anchor | threads | GFLOP/s | spread |\n|---|---|---|---|\n"
  for (a in anchor_names) for (t = 1; t <= n_threads; ++t)
    printf "| %s | %d | %.1f | %s |\n", a, threads_list[t], median(anchor[a, threads_list[t]]), spread(anchor[a, threads_list[t]])
  printf "\nThroughput (samples/s; matmul: products/s), medians of %d interleaved runs, min..max in brackets.\n", reps
  printf "ratio = tapegrad with the system allocator / libtorch with its better allocator.\n\n"
  printf "| workload | threads |"
  for (s = 1; s <= 2; ++s) for (a = 1; a <= n_alloc; ++a) printf " %s %s |", (s == 1 ? "tapegrad" : "libtorch"), alloc_list[a]
  printf " ratio | target | met | tapegrad GFLOP/s | of FMA peak | libtorch best of peak |\n|---|---|"
  for (i = 1; i <= 2 * n_alloc; ++i) printf "---|"
  printf "---|---|---|---|---|---|\n"
  for (w = 1; w <= n_workloads; ++w) for (t = 1; t <= n_threads; ++t) {
    name = workload_list[w]; threads = threads_list[t]
    printf "| %s | %d |", name, threads
    best_torch = 0; ours = 0
    for (s = 1; s <= 2; ++s) for (a = 1; a <= n_alloc; ++a) {
      side = (s == 1 ? "tapegrad" : "libtorch") "/" alloc_list[a]
      m = median(speed[side, name, threads])
      printf " %.4g (%s) |", m, spread(speed[side, name, threads])
      if (s == 2 && m > best_torch) best_torch = m
      if (s == 1 && alloc_list[a] == "system") ours = m
      if (s == 1 && ours == 0) ours = m
    }
    ratio = best_torch > 0 ? ours / best_torch : 0
    goal = (name in target) ? target[name] : 0
    peak = median(anchor[peak_name, threads])
    gf = (name in flops) ? ours * flops[name] * 1e-9 : 0
    torch_gf = (name in flops) ? best_torch * flops[name] * 1e-9 : 0
    printf " %.2fx | %s | %s | %s | %s | %s |\n", ratio, goal ? sprintf(">= %.2fx", goal) : "-",
           goal ? (ratio >= goal ? "yes" : "no") : "-", gf ? sprintf("%.1f", gf) : "-",
           (gf && peak) ? sprintf("%.0f%%", 100 * gf / peak) : "-", (torch_gf && peak) ? sprintf("%.0f%%", 100 * torch_gf / peak) : "-"
  }
  header = 0
  for (w = 1; w <= n_workloads; ++w) for (t = 1; t <= n_threads; ++t) {
    name = workload_list[w]; threads = threads_list[t]
    if (!(name in own_target)) continue
    twin = (name in twin_of) ? twin_of[name] : substr(name, 1, length(name) - 5)  # matmul_bf16 -> matmul
    bf = median(speed["tapegrad/system", name, threads]); f32 = median(speed["tapegrad/system", twin, threads])
    if (!f32) continue
    if (!header) {
      printf "\nbfloat16 autocast against float32, both tapegrad (system allocator, medians):\n\n"
      printf "| workload | threads | bfloat16 | float32 | speed-up | target | met |\n|---|---|---|---|---|---|---|\n"
      header = 1
    }
    printf "| %s | %d | %.4g | %.4g | %.2fx | >= %.1fx | %s |\n", name, threads, bf, f32, bf / f32, own_target[name],
           (bf / f32 >= own_target[name] ? "yes" : "no")
  }
  if (index(" " workloads " ", " cnn ")) {
    printf "\nPeak resident memory (max_rss_mb, median): cnn training, the idle process, and the difference.\n\n"
    printf "| threads | side | cnn MB | idle MB | above idle MB |\n|---|---|---|---|---|\n"
    for (t = 1; t <= n_threads; ++t) for (s = 1; s <= 2; ++s) for (a = 1; a <= n_alloc; ++a) {
      threads = threads_list[t]; side = (s == 1 ? "tapegrad" : "libtorch") "/" alloc_list[a]
      c = median(rss[side, "cnn", threads]); i = median(rss[side, "idle", threads])
      printf "| %d | %s | %.1f | %.1f | %.1f |\n", threads, side, c, i, c - i
    }
  }
}
