//! attention_port.rs: the attention-ports protocol (version 1) for a port written in Rust.
//!
//! One file, the standard library only (no crate). Put it beside your port and use it as a module:
//!
//! ```ignore
//! #[path = "attention_port.rs"] mod attention_port;
//! use attention_port::{Array, Call, Outputs};
//! fn softmax(c: &Call) -> Result<Outputs, String> {
//!     let x = c.f64_array("x")?;                       // row-major, the reference's shape
//!     let mut y = Array::zeros_f64(&x.shape);
//!     ...                                              // fill y.f64_mut()
//!     Ok(vec![("y".into(), y)])
//! }
//! fn main() { std::process::exit(attention_port::serve("my port 0.1", &[("softmax", softmax)], "float64", "zeros")) }
//! ```
//!
//! then `rustc -O -o port port.rs` and `attention-ports verify --port rs=port.toml` (docs/protocol.md).
//! The port is declared row-major and 0-based: arrays have the reference's shapes, as NumPy holds
//! them. Stdout and stderr are yours (captured by the suite); an `Err` is that case's error.
#![allow(dead_code)]

use std::fs::File;
use std::io::{IoSlice, Read, Write};
use std::os::unix::io::FromRawFd;
use std::time::Instant;

pub const VERSION: u8 = 1;

#[derive(Clone, Debug)]
pub enum Data {
    F64(Vec<f64>),
    F32(Vec<f32>),
    F16(Vec<u16>),  // float16 bits
    BF16(Vec<u16>), // bfloat16 bits: the upper half of a float32
    I64(Vec<i64>),
    Bool(Vec<u8>),
}

#[derive(Clone, Debug)]
pub struct Array {
    pub shape: Vec<usize>, // row-major: the last axis varies fastest
    pub data: Data,
}

impl Array {
    pub fn zeros_f64(shape: &[usize]) -> Array {
        Array { shape: shape.to_vec(), data: Data::F64(vec![0.0; shape.iter().product()]) }
    }
    pub fn f64(&self) -> Option<&[f64]> {
        match &self.data {
            Data::F64(v) => Some(v),
            _ => None,
        }
    }
    pub fn f64_mut(&mut self) -> &mut [f64] {
        match &mut self.data {
            Data::F64(v) => v,
            _ => panic!("not a float64 array"),
        }
    }
    /// A port declaring precision "float32" gets its arrays (and real options) as float32.
    pub fn zeros_f32(shape: &[usize]) -> Array {
        Array { shape: shape.to_vec(), data: Data::F32(vec![0.0; shape.iter().product()]) }
    }
    pub fn f32(&self) -> Option<&[f32]> {
        match &self.data {
            Data::F32(v) => Some(v),
            _ => None,
        }
    }
    pub fn f32_mut(&mut self) -> &mut [f32] {
        match &mut self.data {
            Data::F32(v) => v,
            _ => panic!("not a float32 array"),
        }
    }
    fn tag(&self) -> u8 {
        match self.data {
            Data::F64(_) => b'A',
            Data::F32(_) => b'a',
            Data::F16(_) => b'g',
            Data::BF16(_) => b'w',
            Data::I64(_) => b'Z',
            Data::Bool(_) => b'K',
        }
    }
}

#[derive(Clone, Debug)]
pub enum Value {
    Nothing,
    Bool(bool),
    Int(i64),
    F64(f64),
    F32(f32),
    F16(u16),
    BF16(u16),
    Str(String),
    Array(Array),
    Group(Vec<(String, Value)>),
    List(Vec<Value>),
}

pub struct Call {
    pub op: String,
    pub args: Vec<(String, Value)>, // every argument by its contract name (positional ones too)
}

pub type Outputs = Vec<(String, Array)>;
pub type Op = fn(&Call) -> Result<Outputs, String>;

impl Call {
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.args.iter().find(|(n, _)| n == name).map(|(_, v)| v).filter(|v| !matches!(v, Value::Nothing))
    }
    /// A float64 array argument (the contract's arrays at float64).
    pub fn f64_array(&self, name: &str) -> Result<&Array, String> {
        self.optional_f64_array(name)?.ok_or_else(|| format!("{}: the required argument {} is absent", self.op, name))
    }
    pub fn optional_f64_array(&self, name: &str) -> Result<Option<&Array>, String> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Array(a)) if a.f64().is_some() => Ok(Some(a)),
            Some(other) => Err(format!("{}: argument {} is {:?}; this port wants a float64 array", self.op, name, kind(other))),
        }
    }
    /// A float32 array argument (what a port declaring precision "float32" is sent).
    pub fn f32_array(&self, name: &str) -> Result<&Array, String> {
        self.optional_f32_array(name)?.ok_or_else(|| format!("{}: the required argument {} is absent", self.op, name))
    }
    pub fn optional_f32_array(&self, name: &str) -> Result<Option<&Array>, String> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Array(a)) if a.f32().is_some() => Ok(Some(a)),
            Some(other) => Err(format!("{}: argument {} is {:?}; this port wants a float32 array", self.op, name, kind(other))),
        }
    }
    /// A real option (F, f, I); None when absent.
    pub fn option_f64(&self, name: &str) -> Option<f64> {
        match self.get(name)? {
            Value::F64(x) => Some(*x),
            Value::F32(x) => Some(*x as f64),
            Value::Int(i) => Some(*i as f64),
            _ => None,
        }
    }
    pub fn option_i64(&self, name: &str) -> Option<i64> {
        match self.get(name)? {
            Value::Int(i) => Some(*i),
            Value::F64(x) if x.fract() == 0.0 => Some(*x as i64),
            _ => None,
        }
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Nothing => "nothing",
        Value::Bool(_) => "a logical",
        Value::Int(_) => "an integer",
        Value::F64(_) | Value::F32(_) | Value::F16(_) | Value::BF16(_) => "a number",
        Value::Str(_) => "a string",
        Value::Array(_) => "an array of another type",
        Value::Group(_) => "a group",
        Value::List(_) => "a list",
    }
}

// --- reading a body: every length checked against what is left --------------------------------
struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if n > self.b.len() - self.pos {
            return Err(format!("truncated body: {} bytes wanted at offset {}", n, self.pos));
        }
        let out = &self.b[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, String> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().unwrap()))
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn i64(&mut self) -> Result<i64, String> {
        Ok(i64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn str(&mut self) -> Result<String, String> {
        let n = self.u32()? as usize;
        Ok(String::from_utf8_lossy(self.take(n)?).into_owned())
    }
    fn value(&mut self, depth: usize) -> Result<Value, String> {
        if depth > 16 {
            return Err("values nested more than 16 deep".into());
        }
        let tag = self.u8()?;
        Ok(match tag {
            b'N' => Value::Nothing,
            b'B' => Value::Bool(self.u8()? != 0),
            b'I' => Value::Int(self.i64()?),
            b'F' => Value::F64(f64::from_le_bytes(self.take(8)?.try_into().unwrap())),
            b'f' => Value::F32(f32::from_le_bytes(self.take(4)?.try_into().unwrap())),
            b'h' => Value::F16(self.u16()?),
            b'b' => Value::BF16(self.u16()?),
            b'S' => Value::Str(self.str()?),
            b'T' => {
                let n = self.u32()?;
                let mut items = Vec::new();
                for _ in 0..n {
                    let k = self.str()?;
                    items.push((k, self.value(depth + 1)?));
                }
                Value::Group(items)
            }
            b'V' => {
                let n = self.u32()?;
                let mut items = Vec::new();
                for _ in 0..n {
                    items.push(self.value(depth + 1)?);
                }
                Value::List(items)
            }
            b'A' | b'a' | b'g' | b'w' | b'Z' | b'K' => Value::Array(self.array(tag)?),
            _ => return Err(format!("unknown value tag {:?} at offset {}", tag as char, self.pos - 1)),
        })
    }
    fn array(&mut self, tag: u8) -> Result<Array, String> {
        let ndim = self.u8()? as usize;
        if ndim > 32 {
            return Err(format!("an array of {} dimensions", ndim));
        }
        let mut shape = Vec::with_capacity(ndim);
        for _ in 0..ndim {
            let d = self.i64()?;
            if d < 0 {
                return Err("an array of negative size".into());
            }
            shape.push(d as usize);
        }
        shape.reverse(); // the wire is column-major: its dims reversed are the row-major shape
        let n = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).ok_or("an absurd array size")?;
        let size = match tag {
            b'A' | b'Z' => 8,
            b'a' => 4,
            b'g' | b'w' => 2,
            _ => 1,
        };
        let bytes = self.take(n.checked_mul(size).ok_or("an absurd array size")?)?;
        let data = match tag {
            b'A' => Data::F64(bytes.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect()),
            b'a' => Data::F32(bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()),
            b'g' => Data::F16(bytes.chunks_exact(2).map(|c| u16::from_le_bytes(c.try_into().unwrap())).collect()),
            b'w' => Data::BF16(bytes.chunks_exact(2).map(|c| u16::from_le_bytes(c.try_into().unwrap())).collect()),
            b'Z' => Data::I64(bytes.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect()),
            _ => Data::Bool(bytes.to_vec()),
        };
        Ok(Array { shape, data })
    }
}

// --- writing ---------------------------------------------------------------------------------
fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_array(out: &mut Vec<u8>, a: &Array) {
    out.push(a.tag());
    out.push(a.shape.len() as u8);
    for d in a.shape.iter().rev() {
        out.extend_from_slice(&(*d as i64).to_le_bytes()); // row-major -> the wire's dims
    }
    match &a.data {
        Data::F64(v) => put_elements(out, v, f64::to_le_bytes),
        Data::F32(v) => put_elements(out, v, f32::to_le_bytes),
        Data::F16(v) | Data::BF16(v) => put_elements(out, v, u16::to_le_bytes),
        Data::I64(v) => put_elements(out, v, i64::to_le_bytes),
        Data::Bool(v) => out.extend_from_slice(v),
    }
}

/// The elements' little-endian bytes: on a little-endian machine their own bytes, in one copy
/// (element by element, 4 MiB took ~10 ms); elsewhere converted one by one.
fn put_elements<T: Copy, const N: usize>(out: &mut Vec<u8>, v: &[T], le: fn(T) -> [u8; N]) {
    if cfg!(target_endian = "little") {
        // plain numbers (f64, f32, u16, i64): every byte initialised, no padding
        out.extend_from_slice(unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) });
    } else {
        out.reserve(v.len() * N);
        v.iter().for_each(|x| out.extend_from_slice(&le(*x)));
    }
}

fn results(outs: &Outputs, seconds: f64) -> Vec<u8> {
    let mut b = vec![b'T'];
    b.extend_from_slice(&seconds.max(0.0).to_le_bytes());
    put_str(&mut b, "");
    b.extend_from_slice(&(outs.len() as u32).to_le_bytes());
    for (name, a) in outs {
        put_str(&mut b, name);
        put_array(&mut b, a);
    }
    b
}

fn text(kind: u8, msg: &str) -> Vec<u8> {
    let mut b = vec![kind];
    put_str(&mut b, msg);
    b
}

// ap.echo (docs/protocol.md, "Echo"): each argument back as arrays.
fn echo(name: &str, v: &Value, out: &mut Outputs) {
    let scalar = |data: Data| Array { shape: vec![], data };
    match v {
        Value::Nothing => {}
        Value::Bool(x) => out.push((name.into(), scalar(Data::Bool(vec![*x as u8])))),
        Value::Int(x) => out.push((name.into(), scalar(Data::I64(vec![*x])))),
        Value::F64(x) => out.push((name.into(), scalar(Data::F64(vec![*x])))),
        Value::F32(x) => out.push((name.into(), scalar(Data::F32(vec![*x])))),
        Value::F16(x) => out.push((name.into(), scalar(Data::F16(vec![*x])))),
        Value::BF16(x) => out.push((name.into(), scalar(Data::BF16(vec![*x])))),
        Value::Str(s) => {
            let bytes: Vec<i64> = s.bytes().map(|c| c as i64).collect();
            out.push((name.into(), Array { shape: vec![bytes.len()], data: Data::I64(bytes) }))
        }
        Value::Array(a) => out.push((name.into(), a.clone())),
        Value::Group(items) => items.iter().for_each(|(k, x)| echo(&format!("{}.{}", name, k), x, out)),
        Value::List(items) => items.iter().enumerate().for_each(|(i, x)| echo(&format!("{}.{}", name, i), x, out)),
    }
}

/// One frame: its header and body in one gathered write (writev), the body not copied.
fn send(w: &mut File, id: u64, body: &[u8]) {
    let mut head = [0u8; 20];
    head[..4].copy_from_slice(b"APr1");
    head[4..12].copy_from_slice(&id.to_le_bytes());
    head[12..].copy_from_slice(&(body.len() as u64).to_le_bytes());
    let (mut a, mut b): (&[u8], &[u8]) = (&head, body);
    while !a.is_empty() || !b.is_empty() {
        match w.write_vectored(&[IoSlice::new(a), IoSlice::new(b)]) {
            Ok(n) if n > 0 => {
                let k = n.min(a.len());
                a = &a[k..];
                b = &b[n - k..];
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            _ => std::process::exit(0), // the suite is gone
        }
    }
}

extern "C" {
    fn prctl(option: i32, ...) -> i32;
    fn getppid() -> i32;
}

fn decode(body: &[u8]) -> Result<Option<(String, Vec<(String, Value)>)>, String> {
    let mut r = Reader { b: body, pos: 0 };
    match r.u8()? {
        b'Q' => return Ok(None),
        b'C' => {}
        k => return Err(format!("this port does not answer request kind {:?}", k as char)),
    }
    let op = r.str()?;
    let n = r.u32()?;
    let mut args = Vec::new();
    for _ in 0..n {
        let mode = r.u8()?;
        if mode != b'p' && mode != b'k' {
            return Err(format!("argument mode {:?}", mode as char));
        }
        let name = r.str()?;
        args.push((name, r.value(0)?));
    }
    if r.pos != body.len() {
        return Err(format!("{} stray bytes after the arguments", body.len() - r.pos));
    }
    Ok(Some((op, args)))
}

/// Greet the suite with the declaration, then answer its calls until it quits; the exit status.
pub fn serve(description: &str, ops: &[(&str, Op)], precision: &str, masked_query: &str) -> i32 {
    let fds: Vec<i32> = std::env::var("ATTENTION_PORTS_WORKER_FDS")
        .unwrap_or_default()
        .split(',')
        .filter_map(|x| x.parse().ok())
        .collect();
    if fds.len() != 2 {
        eprintln!("this is an attention-ports port: run it with `attention-ports verify --port NAME=port.toml`");
        return 2;
    }
    unsafe {
        prctl(1, 9u64); // PR_SET_PDEATHSIG, SIGKILL: die with the suite
        if let Ok(parent) = std::env::var("ATTENTION_PORTS_PARENT_PID") {
            if parent.parse::<i32>().map_or(false, |p| p != getppid()) {
                return 70;
            }
        }
    }
    let (mut input, mut output) = unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) };
    let mut hello = vec![b'H'];
    put_str(&mut hello, description);
    put_str(&mut hello, "");
    hello.extend_from_slice(b"T");
    hello.extend_from_slice(&7u32.to_le_bytes());
    let field = |b: &mut Vec<u8>, k: &str, s: &str| {
        put_str(b, k);
        b.push(b'S');
        put_str(b, s);
    };
    put_str(&mut hello, "protocol");
    hello.push(b'I');
    hello.extend_from_slice(&(VERSION as i64).to_le_bytes());
    field(&mut hello, "language", "Rust");
    field(&mut hello, "layout", "row-major");
    put_str(&mut hello, "index_base");
    hello.push(b'I');
    hello.extend_from_slice(&0i64.to_le_bytes());
    field(&mut hello, "precision", precision);
    field(&mut hello, "masked_query", masked_query);
    put_str(&mut hello, "operations");
    hello.push(b'V');
    hello.extend_from_slice(&(ops.len() as u32).to_le_bytes());
    for (name, _) in ops {
        hello.push(b'S');
        put_str(&mut hello, name);
    }
    send(&mut output, 0, &hello);
    let mut header = [0u8; 20];
    let mut body: Vec<u8> = Vec::new();
    loop {
        match input.read_exact(&mut header) {
            Ok(()) => {}
            Err(_) => return 0, // the suite closed the pipe
        }
        if &header[..4] != b"APq1" {
            eprintln!("attention_port.rs: not a request frame of protocol version {}", VERSION);
            return 3;
        }
        let id = u64::from_le_bytes(header[4..12].try_into().unwrap());
        let len = u64::from_le_bytes(header[12..20].try_into().unwrap()) as usize;
        body.resize(len, 0); // one buffer for every request: no fresh pages each call
        if input.read_exact(&mut body).is_err() {
            eprintln!("attention_port.rs: the request stopped in the middle");
            return 3;
        }
        let (op, args) = match decode(&body) {
            Ok(None) => return 0,
            Ok(Some(call)) => call,
            Err(e) => {
                send(&mut output, id, &text(b'E', &format!("malformed request: {}", e)));
                continue;
            }
        };
        if op == "ap.echo" {
            let mut outs = Vec::new();
            args.iter().for_each(|(n, v)| echo(n, v, &mut outs));
            send(&mut output, id, &results(&outs, 0.0));
            continue;
        }
        // `match`, not `let ... else`: Debian's rustc 1.63 has no let-else (stable from 1.65).
        let f = match ops.iter().find(|(n, _)| *n == op) {
            Some((_, f)) => f,
            None => {
                send(&mut output, id, &text(b'M', &format!("{} is not an operation of this port", op)));
                continue;
            }
        };
        let call = Call { op: op.clone(), args };
        let start = Instant::now();
        let reply = match std::panic::catch_unwind(|| f(&call)) {
            Ok(Ok(outs)) => results(&outs, start.elapsed().as_secs_f64()),
            Ok(Err(msg)) => text(b'E', &msg),
            Err(_) => text(b'E', &format!("{}: the operation panicked (its message is in the output)", op)),
        };
        let _ = std::io::stdout().flush();
        send(&mut output, id, &reply);
    }
}
