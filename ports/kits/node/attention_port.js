// attention_port.js: the attention-ports protocol (version 1) for a port written in JavaScript.
//
// Node only, no npm dependency. A port is a script that requires this file and serves its operations:
//
//   const { serve, zeros } = require("./attention_port.js");
//   function softmax(args) {                 // args: every argument by its contract name
//     const x = args.x;                      // { dtype: "float64", shape: [n, m], data: Float64Array }
//     const y = zeros("float64", x.shape);    // row-major: data[i * m + j] is x[i, j]
//     ...
//     return { y };                          // named outputs (or one bare array)
//   }
//   serve({ softmax }, { description: "my port 0.1" });
//
// then `attention-ports verify --port js=port.toml` with a manifest `command = ["node", "port.js"]`.
// The protocol is docs/protocol.md: this kit declares the port row-major and 0-based (arrays have the
// reference's shapes, as NumPy holds them); stdout and stderr are yours (captured by the suite); a
// thrown error becomes that case's error with its stack.
"use strict";
const fs = require("fs");

const VERSION = 1;
const ARRAYS = { A: "float64", a: "float32", g: "float16", w: "bfloat16", Z: "int64", K: "logical" };
const TAG_OF = Object.fromEntries(Object.entries(ARRAYS).map(([t, d]) => [d, t]));
const SIZE = { float64: 8, float32: 4, float16: 2, bfloat16: 2, int64: 8, logical: 1 };

class Malformed extends Error {}

function typed(dtype, n) {
  switch (dtype) {
    case "float64": return new Float64Array(n);
    case "float32": return new Float32Array(n);
    case "int64": return new BigInt64Array(n);
    case "logical": return new Uint8Array(n);
    default: return new Uint16Array(n); // float16 / bfloat16: their bits
  }
}

/** A new zeroed array of `dtype` ("float64", ...) and row-major `shape`. */
function zeros(dtype, shape) {
  const n = shape.reduce((a, b) => a * b, 1);
  return { dtype, shape: shape.slice(), data: typed(dtype, n) };
}

class Reader {
  constructor(buf) { this.buf = buf; this.pos = 0; }
  take(n) {
    if (n < 0 || n > this.buf.length - this.pos) throw new Malformed(`truncated body: ${n} bytes wanted at offset ${this.pos}`);
    const out = this.buf.subarray(this.pos, this.pos + n);
    this.pos += n;
    return out;
  }
  u8() { return this.take(1)[0]; }
  u32() { return this.take(4).readUInt32LE(0); }
  i64() { return this.take(8).readBigInt64LE(0); }
  str() { return this.take(this.u32()).toString("utf8"); }
  value(depth = 0) {
    if (depth > 16) throw new Malformed("values nested more than 16 deep");
    const tag = String.fromCharCode(this.u8());
    switch (tag) {
      case "N": return null;
      case "B": return this.u8() !== 0;
      case "I": return this.i64();
      case "F": return this.take(8).readDoubleLE(0);
      case "f": return this.take(4).readFloatLE(0);
      case "h": return { dtype: "float16", shape: [], data: Uint16Array.of(this.take(2).readUInt16LE(0)) };
      case "b": return { dtype: "bfloat16", shape: [], data: Uint16Array.of(this.take(2).readUInt16LE(0)) };
      case "S": return this.str();
      case "T": {
        const out = {};
        for (let n = this.u32(); n > 0; n--) { const k = this.str(); out[k] = this.value(depth + 1); }
        return out;
      }
      case "V": {
        const out = [];
        for (let n = this.u32(); n > 0; n--) out.push(this.value(depth + 1));
        return out;
      }
      default: {
        const dtype = ARRAYS[tag];
        if (!dtype) throw new Malformed(`unknown value tag ${JSON.stringify(tag)} at offset ${this.pos - 1}`);
        const ndim = this.u8();
        if (ndim > 32) throw new Malformed(`an array of ${ndim} dimensions`);
        const wire = [];
        for (let i = 0; i < ndim; i++) {
          const d = Number(this.i64());
          if (d < 0) throw new Malformed("an array of negative size");
          wire.push(d);
        }
        // the wire is column-major: its dims reversed are the row-major shape of the same bytes
        const a = zeros(dtype, wire.reverse());
        const bytes = this.take(a.data.length * SIZE[dtype]);
        new Uint8Array(a.data.buffer).set(bytes); // an aligned copy; the wire is little-endian
        return a;
      }
    }
  }
}

class Writer {
  constructor() { this.parts = []; }
  bytes(b) { this.parts.push(Buffer.from(b)); }
  u8(v) { this.parts.push(Buffer.of(v)); }
  u32(v) { const b = Buffer.alloc(4); b.writeUInt32LE(v, 0); this.parts.push(b); }
  i64(v) { const b = Buffer.alloc(8); b.writeBigInt64LE(BigInt(v), 0); this.parts.push(b); }
  f64(v) { const b = Buffer.alloc(8); b.writeDoubleLE(v, 0); this.parts.push(b); }
  str(s) { const b = Buffer.from(s, "utf8"); this.u32(b.length); this.parts.push(b); }
  tag(t) { this.parts.push(Buffer.from(t, "latin1")); }
  array(a) {
    this.tag(TAG_OF[a.dtype]);
    this.u8(a.shape.length);
    for (const d of a.shape.slice().reverse()) this.i64(d); // row-major -> the wire's dims
    this.parts.push(Buffer.from(a.data.buffer, a.data.byteOffset, a.data.byteLength));
  }
  value(v) { // declaration values: null, boolean, number (integer), string, array, object
    if (v === null || v === undefined) this.tag("N");
    else if (typeof v === "boolean") { this.tag("B"); this.u8(v ? 1 : 0); }
    else if (typeof v === "number" && Number.isInteger(v)) { this.tag("I"); this.i64(v); }
    else if (typeof v === "number") { this.tag("F"); this.f64(v); }
    else if (typeof v === "string") { this.tag("S"); this.str(v); }
    else if (Array.isArray(v)) { this.tag("V"); this.u32(v.length); v.forEach((x) => this.value(x)); }
    else { const ks = Object.keys(v); this.tag("T"); this.u32(ks.length); ks.forEach((k) => { this.str(k); this.value(v[k]); }); }
  }
  body() { return Buffer.concat(this.parts); }
}

// A result: an array object, a typed array (1-D), a number (0-D float64), a boolean.
function asArray(v) {
  if (v && v.dtype && v.shape && v.data) return v;
  if (typeof v === "number") return { dtype: "float64", shape: [], data: Float64Array.of(v) };
  if (typeof v === "bigint") return { dtype: "int64", shape: [], data: BigInt64Array.of(v) };
  if (typeof v === "boolean") return { dtype: "logical", shape: [], data: Uint8Array.of(v ? 1 : 0) };
  if (v instanceof Float64Array) return { dtype: "float64", shape: [v.length], data: v };
  if (v instanceof Float32Array) return { dtype: "float32", shape: [v.length], data: v };
  throw new TypeError(`cannot return ${Object.prototype.toString.call(v)}: return { dtype, shape, data } arrays`);
}

function flatten(out, prefix, v) {
  if (v && typeof v === "object" && !v.dtype && !ArrayBuffer.isView(v)) {
    for (const [k, x] of Object.entries(v)) flatten(out, prefix ? `${prefix}.${k}` : k, x);
  } else out.push([prefix, asArray(v)]);
}

function results(result, seconds) {
  const flat = [];
  flatten(flat, "", result);
  const w = new Writer();
  w.tag("T"); w.f64(Math.max(0, seconds)); w.str(""); w.u32(flat.length);
  for (const [name, a] of flat) { w.str(name); w.array(a); }
  return w.body();
}

// ap.echo (docs/protocol.md, "Echo"): each argument back as arrays.
function echo(args) {
  const out = {};
  const put = (name, v) => {
    if (v === null) return;
    if (typeof v === "string") {
      const b = Buffer.from(v, "utf8");
      out[name] = { dtype: "int64", shape: [b.length], data: BigInt64Array.from(b, (x) => BigInt(x)) };
    } else if (typeof v === "bigint") out[name] = { dtype: "int64", shape: [], data: BigInt64Array.of(v) };
    else if (Array.isArray(v)) v.forEach((x, i) => put(`${name}.${i}`, x));
    else if (v && typeof v === "object" && !v.dtype) Object.entries(v).forEach(([k, x]) => put(`${name}.${k}`, x));
    else out[name] = asArray(v);
  };
  for (const a of args) put(a.name, a.value);
  // a float32 scalar arrives as a JS number: echo it as float32 when its tag said so
  for (const a of args) if (a.tag === "f") out[a.name] = { dtype: "float32", shape: [], data: Float32Array.of(a.value) };
  return results(out, 0);
}

function readFully(fd, n) {
  const buf = Buffer.alloc(n);
  let got = 0;
  while (got < n) {
    let r;
    try { r = fs.readSync(fd, buf, got, n - got, null); } catch (e) { if (e.code === "EAGAIN") continue; throw e; }
    if (r === 0) {
      if (got === 0) return null;
      process.stderr.write("attention_port.js: the request stopped in the middle\n");
      process.exit(3);
    }
    got += r;
  }
  return buf;
}

function send(fd, id, body) {
  const head = Buffer.alloc(20);
  head.write("APr1", 0, "latin1");
  head.writeBigUInt64LE(BigInt(id), 4);
  head.writeBigUInt64LE(BigInt(body.length), 12);
  const frame = Buffer.concat([head, body]);
  for (let off = 0; off < frame.length;) {
    try { off += fs.writeSync(fd, frame, off); } catch (e) { if (e.code !== "EAGAIN") throw e; }
  }
}

function textReply(kind, text) { const w = new Writer(); w.tag(kind); w.str(text); return w.body(); }

/** Greet the suite with the declaration, then answer its calls until it quits. */
function serve(operations, { description = "a JavaScript port", precision = "float64", masked_query = "zeros" } = {}) {
  const fds = (process.env.ATTENTION_PORTS_WORKER_FDS || "").split(",").map(Number);
  if (fds.length !== 2 || fds.some((x) => !Number.isInteger(x))) {
    process.stderr.write("this is an attention-ports port: run it with `attention-ports verify --port NAME=port.toml`\n");
    process.exit(2);
  }
  const [requestFd, replyFd] = fds;
  // Node has no prctl: if the suite is gone, the reads below end with end of file (or the suite's
  // reaper ends this process).
  const declaration = {
    protocol: VERSION, language: "JavaScript", layout: "row-major", index_base: 0,
    precision, masked_query, operations: Object.keys(operations),
  };
  const hello = new Writer();
  hello.tag("H"); hello.str(description); hello.str(""); hello.value(declaration);
  send(replyFd, 0, hello.body());
  for (;;) {
    const header = readFully(requestFd, 20);
    if (header === null) return;
    if (header.toString("latin1", 0, 4) !== "APq1") {
      process.stderr.write(`attention_port.js: not a request frame of protocol version ${VERSION}\n`);
      process.exit(3);
    }
    const id = header.readBigUInt64LE(4);
    const length = Number(header.readBigUInt64LE(12));
    const body = length ? readFully(requestFd, length) : Buffer.alloc(0);
    if (body === null) return;
    let op, args;
    try {
      const r = new Reader(body);
      const kind = String.fromCharCode(r.u8());
      if (kind === "Q") process.exit(0);
      if (kind !== "C") { send(replyFd, id, textReply("E", `this port does not answer request kind ${kind}`)); continue; }
      op = r.str();
      args = [];
      for (let n = r.u32(); n > 0; n--) {
        const mode = String.fromCharCode(r.u8());
        if (mode !== "p" && mode !== "k") throw new Malformed(`argument mode ${mode}`);
        const name = r.str();
        const tag = String.fromCharCode(r.buf[r.pos]);
        args.push({ mode, name, tag, value: r.value() });
      }
      if (r.pos !== body.length) throw new Malformed(`${body.length - r.pos} stray bytes after the arguments`);
    } catch (e) {
      if (!(e instanceof Malformed)) throw e;
      send(replyFd, id, textReply("E", `malformed request: ${e.message}`));
      continue;
    }
    if (op === "ap.echo") { send(replyFd, id, echo(args)); continue; }
    const fn = operations[op];
    if (!fn) { send(replyFd, id, textReply("M", `${op} is not an operation of this port`)); continue; }
    const named = {};
    for (const a of args) named[a.name] = typeof a.value === "bigint" ? Number(a.value) : a.value;
    const start = process.hrtime.bigint();
    let reply;
    try {
      const out = fn(named);
      reply = results(out, Number(process.hrtime.bigint() - start) / 1e9);
    } catch (e) {
      reply = textReply("E", `${op}: ${e && e.stack ? e.stack : e}`);
    }
    send(replyFd, id, reply);
  }
}

module.exports = { serve, zeros, VERSION };
