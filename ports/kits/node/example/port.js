// A walkthrough port with the JavaScript kit: softmax, scaled_dot_product_attention and
// multi_head_attention at float64, row-major and 0-based (the reference's layout).
//
//   attention-ports verify --port js=ports/kits/node/example/port.toml
"use strict";
const path = require("path");
const { serve, zeros } = require(path.join(__dirname, "..", "attention_port.js"));

// Along the last axis; an all -Infinity row comes back NaN (0/0), as the reference's does.
function softmaxRows(x, y, rows, n) {
  for (let i = 0; i < rows; i++) {
    let peak = -Infinity, sum = 0;
    for (let j = 0; j < n; j++) peak = Math.max(peak, x[i * n + j]);
    for (let j = 0; j < n; j++) sum += (y[i * n + j] = Math.exp(x[i * n + j] - peak));
    for (let j = 0; j < n; j++) y[i * n + j] /= sum;
  }
}

function softmax({ x }) {
  if (x.data.some((v) => Number.isNaN(v) || v === Infinity)) throw new Error("softmax: x contains NaN or +Infinity");
  const n = x.shape[x.shape.length - 1];
  const y = zeros("float64", x.shape);
  softmaxRows(x.data, y.data, n ? x.data.length / n : 0, n);
  return { y };
}

// One head over column blocks: q (nq rows, stride sq), k, v (nk rows); out (stride so), w (nq x nk).
// A query whose every score is -Infinity gets zero weights and output (masked_query "zeros").
function attend(q, sq, k, sk, v, sv, mask, nq, nk, d, dv, scale, out, so, w) {
  for (let i = 0; i < nq; i++) {
    let dead = true;
    for (let j = 0; j < nk; j++) {
      let s = 0;
      for (let t = 0; t < d; t++) s += q[i * sq + t] * k[j * sk + t];
      s *= scale;
      if (mask) s += mask[i * nk + j];
      w[i * nk + j] = s;
      if (s !== -Infinity) dead = false;
    }
    const wi = w.subarray(i * nk, (i + 1) * nk);
    if (dead) wi.fill(0);
    else softmaxRows(wi, wi, 1, nk);
    for (let t = 0; t < dv; t++) {
      let s = 0;
      for (let j = 0; j < nk; j++) s += wi[j] * v[j * sv + t];
      out[i * so + t] = s;
    }
  }
}

function scaled_dot_product_attention({ q, k, v, mask, scale }) {
  const [nq, d] = q.shape, nk = k.shape[0], dv = v.shape[1];
  if (k.shape[1] !== d || v.shape[0] !== nk) throw new Error(`q ${q.shape}, k ${k.shape}, v ${v.shape} do not fit`);
  const output = zeros("float64", [nq, dv]), weights = zeros("float64", [nq, nk]);
  attend(q.data, d, k.data, d, v.data, dv, mask ? mask.data : null, nq, nk, d, dv,
    scale === undefined ? 1 / Math.sqrt(d) : scale, output.data, dv, weights.data);
  return { output, weights };
}

function project(x, w, b) { // x (n x din) w (din x dout) + b
  const [n, din] = x.shape, dout = w.shape[1];
  const y = new Float64Array(n * dout);
  for (let i = 0; i < n; i++) {
    for (let j = 0; j < dout; j++) {
      let s = 0;
      for (let t = 0; t < din; t++) s += x.data[i * din + t] * w.data[t * dout + j];
      y[i * dout + j] = b ? s + b.data[j] : s;
    }
  }
  return y;
}

function multi_head_attention(a) {
  const [nq, dm] = a.query.shape, nk = a.key.shape[0], heads = a.num_heads, dh = dm / heads;
  if (!Number.isInteger(dh)) throw new Error(`num_heads=${heads} must divide d_model=${dm}`);
  const q = project(a.query, a.w_q, a.b_q), k = project(a.key, a.w_k, a.b_k), v = project(a.value, a.w_v, a.b_v);
  const concat = { dtype: "float64", shape: [nq, dm], data: new Float64Array(nq * dm) };
  const weights = zeros("float64", [heads, nq, nk]);
  for (let h = 0; h < heads; h++) {
    attend(q.subarray(h * dh), dm, k.subarray(h * dh), dm, v.subarray(h * dh), dm, a.mask ? a.mask.data : null,
      nq, nk, dh, dh, 1 / Math.sqrt(dh), concat.data.subarray(h * dh), dm, weights.data.subarray(h * nq * nk));
  }
  const output = { dtype: "float64", shape: [nq, dm], data: project(concat, a.w_o, a.b_o) };
  return { output, weights };
}

serve({ softmax, scaled_dot_product_attention, multi_head_attention },
  { description: `JavaScript kit walkthrough port 1.0 (Node ${process.version})` });
