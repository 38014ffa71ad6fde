#!/usr/bin/env node
// Runs an ONNX model in ONNX Runtime (npm's onnxruntime-node, its CPU runtime) on the inputs of a tensor file and
// writes every output to another tensor file: the production runtime that tapegrad's ONNX export is checked
// against (tests/support/onnx_runtime.h calls it; the main job and bench/onnx_latency.sh too).
//
//   node tests/onnx/run_model.js MODEL.onnx INPUTS.tgt OUTPUTS.tgt [--threads N] [--ort-dir DIR]
//   node tests/onnx/run_model.js MODEL.onnx INPUTS.tgt --time SECONDS [--warmup N] [--threads N] [--ort-dir DIR]
//
// --threads N    ONNX Runtime's intra-op threads (default 1); inter-op threads are 1, execution sequential.
// --ort-dir DIR  where scripts/setup_onnxruntime.sh installed onnxruntime-node (DIR/node_modules/...); default
//                $TAPEGRAD_ONNXRUNTIME_DIR, else <repo>/build/onnxruntime.
// --time S       latency mode: no output file; `--warmup` runs (default 10), then session.run again and again
//                until S seconds have passed; prints one JSON line: runs, median/min/max/mean milliseconds per
//                run (each run timed alone with process.hrtime around `await session.run`).
// --batches N    output mode: run the inputs in N slices along their first axis (every input is split, the
//                outputs concatenated), so a large input set needs no large intermediate tensors.
//
// Tensor file (little-endian): the 8 bytes "TGTENSR1", a uint64 header length H, H bytes of UTF-8 JSON
// {"tensors": [{"name": "input", "dtype": "float32", "shape": [2, 3]}, ...]}, then each tensor's elements in
// that order, row-major, with no padding. dtypes: float32, float64, int64.
// Exit status: 0 on success, 1 on any error (message on stderr), 2 on bad arguments.
'use strict';

const fs = require('fs');
const path = require('path');

const MAGIC = 'TGTENSR1';
const DTYPES = {
  float32: { bytes: 4, array: Float32Array },
  float64: { bytes: 8, array: Float64Array },
  int64: { bytes: 8, array: BigInt64Array },
};

function usage(message) {
  if (message) process.stderr.write(`run_model.js: ${message}\n`);
  process.stderr.write('usage: node run_model.js MODEL.onnx INPUTS.tgt (OUTPUTS.tgt | --time SECONDS) ' +
                       '[--threads N] [--warmup N] [--batches N] [--ort-dir DIR]\n');
  process.exit(2);
}

function parseArguments(argv) {
  const options = { threads: 1, warmup: 10, time: 0, batches: 1, ortDir: '', positional: [] };
  for (let i = 0; i < argv.length; ++i) {
    const arg = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) usage(`${arg} needs a value`);
      return argv[++i];
    };
    const positive = (text, name) => {
      const n = Number(text);
      if (!Number.isFinite(n) || n <= 0) usage(`${name} must be a positive number, got '${text}'`);
      return n;
    };
    if (arg === '--threads') options.threads = Math.floor(positive(value(), arg));
    else if (arg === '--warmup') options.warmup = Math.floor(Number(value()));
    else if (arg === '--time') options.time = positive(value(), arg);
    else if (arg === '--batches') options.batches = Math.floor(positive(value(), arg));
    else if (arg === '--ort-dir') options.ortDir = value();
    else if (arg.startsWith('--')) usage(`unknown option ${arg}`);
    else options.positional.push(arg);
  }
  const expected = options.time > 0 ? 2 : 3;
  if (options.positional.length !== expected) usage(`expected ${expected} file arguments`);
  if (!options.ortDir) {
    options.ortDir = process.env.TAPEGRAD_ONNXRUNTIME_DIR || path.join(__dirname, '..', '..', 'build', 'onnxruntime');
  }
  return options;
}

// Note: required from the install directory by absolute path, so the runner works from any working directory
// and never picks up another copy of the package.
function loadRuntime(dir) {
  const modulePath = path.join(path.resolve(dir), 'node_modules', 'onnxruntime-node');
  try {
    return require(modulePath);
  } catch (error) {
    throw new Error(`cannot load onnxruntime-node from ${modulePath} (install it with ` +
                    `bash scripts/setup_onnxruntime.sh): ${error.message}`);
  }
}

function readTensorFile(file) {
  const bytes = fs.readFileSync(file);
  if (bytes.length < 16 || bytes.toString('latin1', 0, 8) !== MAGIC) throw new Error(`${file}: not a tensor file`);
  const headerLength = Number(bytes.readBigUInt64LE(8));
  if (16 + headerLength > bytes.length) throw new Error(`${file}: truncated header`);
  const header = JSON.parse(bytes.toString('utf8', 16, 16 + headerLength));
  let offset = 16 + headerLength;
  const tensors = [];
  for (const entry of header.tensors) {
    const dtype = DTYPES[entry.dtype];
    if (!dtype) throw new Error(`${file}: tensor '${entry.name}' has unknown dtype '${entry.dtype}'`);
    const count = entry.shape.reduce((a, b) => a * b, 1);
    const nbytes = count * dtype.bytes;
    if (offset + nbytes > bytes.length) throw new Error(`${file}: tensor '${entry.name}' is truncated`);
    // Note: copied into a fresh, aligned ArrayBuffer (a typed array over the file's buffer may be misaligned).
    const data = new dtype.array(count);
    new Uint8Array(data.buffer).set(bytes.subarray(offset, offset + nbytes));
    offset += nbytes;
    tensors.push({ name: entry.name, dtype: entry.dtype, shape: entry.shape, data });
  }
  if (offset !== bytes.length) throw new Error(`${file}: ${bytes.length - offset} bytes after the last tensor`);
  return tensors;
}

function writeTensorFile(file, tensors) {
  const header = Buffer.from(JSON.stringify({
    tensors: tensors.map((t) => ({ name: t.name, dtype: t.dtype, shape: t.shape })),
  }), 'utf8');
  const prefix = Buffer.alloc(16);
  prefix.write(MAGIC, 0, 'latin1');
  prefix.writeBigUInt64LE(BigInt(header.length), 8);
  const parts = [prefix, header];
  for (const t of tensors) parts.push(Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength));
  const temporary = `${file}.partial`;
  fs.writeFileSync(temporary, Buffer.concat(parts));
  fs.renameSync(temporary, file);
}

function ortType(dtype) {
  return dtype === 'float32' ? 'float32' : dtype === 'float64' ? 'float64' : 'int64';
}

function feedsOf(ort, tensors, session) {
  const feeds = {};
  for (const t of tensors) feeds[t.name] = new ort.Tensor(ortType(t.dtype), t.data, t.shape);
  for (const name of session.inputNames) {
    if (!(name in feeds)) throw new Error(`the model's input '${name}' is not in the input file`);
  }
  return feeds;
}

// The rows [begin, end) of a tensor's first axis.
function sliceRows(t, begin, end) {
  const rowSize = t.shape.slice(1).reduce((a, b) => a * b, 1);
  return { name: t.name, dtype: t.dtype, shape: [end - begin, ...t.shape.slice(1)],
           data: t.data.slice(begin * rowSize, end * rowSize) };
}

function concatRows(parts) {
  const first = parts[0];
  const rows = parts.reduce((n, p) => n + p.shape[0], 0);
  const data = new first.data.constructor(parts.reduce((n, p) => n + p.data.length, 0));
  let at = 0;
  for (const p of parts) {
    data.set(p.data, at);
    at += p.data.length;
  }
  return { name: first.name, dtype: first.dtype, shape: [rows, ...first.shape.slice(1)], data };
}

const DTYPE_OF_ORT = { float32: 'float32', float64: 'float64', int64: 'int64' };

function outputsOf(session, results) {
  return session.outputNames.map((name) => {
    const value = results[name];
    const dtype = DTYPE_OF_ORT[value.type];
    if (!dtype) throw new Error(`output '${name}' has type ${value.type}, which the tensor file cannot hold`);
    return { name, dtype, shape: value.dims.map(Number), data: value.data };
  });
}

async function main() {
  const options = parseArguments(process.argv.slice(2));
  const [modelPath, inputPath, outputPath] = options.positional;
  const ort = loadRuntime(options.ortDir);
  const session = await ort.InferenceSession.create(modelPath, {
    intraOpNumThreads: options.threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
  });
  const inputs = readTensorFile(inputPath);

  if (options.time > 0) {
    const feeds = feedsOf(ort, inputs, session);
    for (let i = 0; i < options.warmup; ++i) await session.run(feeds);
    const times = [];
    const end = process.hrtime.bigint() + BigInt(Math.round(options.time * 1e9));
    do {
      const start = process.hrtime.bigint();
      await session.run(feeds);
      times.push(Number(process.hrtime.bigint() - start) / 1e6);
    } while (process.hrtime.bigint() < end);
    times.sort((a, b) => a - b);
    const median = times.length % 2 ? times[(times.length - 1) / 2]
                                    : (times[times.length / 2 - 1] + times[times.length / 2]) / 2;
    const mean = times.reduce((a, b) => a + b, 0) / times.length;
    process.stdout.write(JSON.stringify({ runs: times.length, threads: options.threads, median_ms: median,
                                          min_ms: times[0], max_ms: times[times.length - 1], mean_ms: mean,
                                          ort_version: ort.env.versions ? ort.env.versions.common : undefined }) +
                         '\n');
    return;
  }

  const rows = inputs.length ? inputs[0].shape[0] : 0;
  const batches = Math.max(1, Math.min(options.batches, rows || 1));
  if (batches > 1 && inputs.some((t) => t.shape.length === 0 || t.shape[0] !== rows)) {
    throw new Error('--batches needs every input to have the same first extent');
  }
  const pieces = [];
  for (let b = 0; b < batches; ++b) {
    const begin = Math.floor((rows * b) / batches), end = Math.floor((rows * (b + 1)) / batches);
    const part = batches > 1 ? inputs.map((t) => sliceRows(t, begin, end)) : inputs;
    pieces.push(outputsOf(session, await session.run(feedsOf(ort, part, session))));
  }
  const outputs = batches > 1 ? pieces[0].map((_, i) => concatRows(pieces.map((p) => p[i]))) : pieces[0];
  writeTensorFile(outputPath, outputs);
}

main().catch((error) => {
  process.stderr.write(`run_model.js: ${error && error.message ? error.message : error}\n`);
  process.exit(1);
});
