// Runs ONNX models in onnxruntime-node and records the shape and dtype of every tensor it is asked for.
//
//   ORT_NODE_DIR=/path/with/node_modules node validate/ort/run_shapes.mjs JOB.json OUT.json
//
// JOB.json (written by validate/ort/run_shapes.py): {"runs": [{"id", "model", "inputs": {name: {"type",
// "dims", "data"}}}]}; each model already lists every tensor it should report as a graph output. OUT.json:
// {"onnxruntime_node": version, "runs": {id: {name: {"dtype", "shape"}}}}. Graph optimizations are off, so
// that ONNX Runtime runs the graph as written (no fused nodes whose tensors would vanish).
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const dir = process.env.ORT_NODE_DIR;
if (!dir) {
  console.error('run_shapes.mjs: set ORT_NODE_DIR to the folder whose node_modules holds onnxruntime-node');
  process.exit(2);
}
const require = createRequire(path.join(path.resolve(dir), 'package.json'));
const ort = require('onnxruntime-node');

const [jobPath, outPath] = process.argv.slice(2);
const job = JSON.parse(fs.readFileSync(jobPath, 'utf8'));

function tensor(spec) {
  const n = spec.dims.reduce((a, b) => a * b, 1);
  if (spec.data.length !== n) throw new Error(`input has ${spec.data.length} values for dims ${spec.dims}`);
  switch (spec.type) {
    case 'int64': return new ort.Tensor('int64', BigInt64Array.from(spec.data.map(BigInt)), spec.dims);
    case 'int32': return new ort.Tensor('int32', Int32Array.from(spec.data), spec.dims);
    case 'float32': return new ort.Tensor('float32', Float32Array.from(spec.data), spec.dims);
    case 'bool': return new ort.Tensor('bool', Uint8Array.from(spec.data.map(Number)), spec.dims);
    default: throw new Error(`unsupported input type ${spec.type}`);
  }
}

const sessions = new Map();
const out = { onnxruntime_node: ort.env.versions.node, runs: {} };
for (const run of job.runs) {
  if (!sessions.has(run.model)) {
    sessions.set(run.model, await ort.InferenceSession.create(run.model, {
      graphOptimizationLevel: 'disabled', executionProviders: ['cpu'], intraOpNumThreads: 1, interOpNumThreads: 1,
    }));
  }
  const feeds = {};
  for (const [name, spec] of Object.entries(run.inputs)) feeds[name] = tensor(spec);
  const results = await sessions.get(run.model).run(feeds);
  const shapes = {};
  for (const [name, t] of Object.entries(feeds)) shapes[name] = { dtype: t.type, shape: t.dims.map(Number) };
  for (const [name, t] of Object.entries(results)) shapes[name] = { dtype: t.type, shape: t.dims.map(Number) };
  out.runs[run.id] = shapes;
  console.log(`${run.id}: ${Object.keys(results).length} tensors`);
}
fs.writeFileSync(outPath, JSON.stringify(out));
