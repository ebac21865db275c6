//! The Rust walkthrough port in single precision: softmax, scaled_dot_product_attention and
//! multi_head_attention computed in f32 throughout (every product, sum, exp and division), declared
//! `precision = "float32"`: the suite sends it float32 arrays and options and judges it on the
//! float32 tier (docs/precision.md), row-major and 0-based as ../example/port.rs.
//!
//!     attention-ports verify --port rs32=ports/kits/rust/example32/port.toml   (builds it with rustc)
#[path = "../attention_port.rs"]
mod attention_port;
use attention_port::{Array, Call, Data, Outputs};

/// Along the last axis, in place; an all -inf row comes back NaN (0/0), as the reference's does.
fn softmax_rows(y: &mut [f32], n: usize) {
    for row in y.chunks_mut(n.max(1)) {
        let peak = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0.0f32;
        for v in row.iter_mut() {
            *v = (*v - peak).exp();
            sum += *v;
        }
        row.iter_mut().for_each(|v| *v /= sum);
    }
}

fn softmax(c: &Call) -> Result<Outputs, String> {
    let x = c.f32_array("x")?;
    let xs = x.f32().unwrap();
    if xs.iter().any(|v| v.is_nan() || *v == f32::INFINITY) {
        return Err("softmax: x contains NaN or +Inf".into());
    }
    let mut y = x.clone();
    softmax_rows(y.f32_mut(), *x.shape.last().ok_or("softmax: x must have at least one dimension")?);
    Ok(vec![("y".into(), y)])
}

/// One head over column blocks (strides sq, sk, sv, so): out (nq x dv), w (nq x nk). A query whose
/// every score is -inf gets zero weights and output (masked_query "zeros").
#[allow(clippy::too_many_arguments)]
fn attend(q: &[f32], sq: usize, k: &[f32], sk: usize, v: &[f32], sv: usize, mask: Option<&[f32]>, nq: usize,
          nk: usize, d: usize, dv: usize, scale: f32, out: &mut [f32], so: usize, w: &mut [f32]) {
    for i in 0..nq {
        let wi = &mut w[i * nk..(i + 1) * nk];
        for j in 0..nk {
            let mut s = 0.0f32;
            for t in 0..d {
                s += q[i * sq + t] * k[j * sk + t];
            }
            s *= scale;
            if let Some(m) = mask {
                s += m[i * nk + j];
            }
            wi[j] = s;
        }
        if wi.iter().all(|s| *s == f32::NEG_INFINITY) {
            wi.iter_mut().for_each(|s| *s = 0.0);
        } else {
            softmax_rows(wi, nk);
        }
        for t in 0..dv {
            out[i * so + t] = (0..nk).map(|j| wi[j] * v[j * sv + t]).sum();
        }
    }
}

fn scaled_dot_product_attention(c: &Call) -> Result<Outputs, String> {
    let (q, k, v) = (c.f32_array("q")?, c.f32_array("k")?, c.f32_array("v")?);
    let mask = c.optional_f32_array("mask")?;
    let (nq, d, nk, dv) = (q.shape[0], q.shape[1], k.shape[0], v.shape[1]);
    if k.shape[1] != d || v.shape[0] != nk {
        return Err(format!("q {:?}, k {:?}, v {:?} do not fit", q.shape, k.shape, v.shape));
    }
    // a float32 option arrives as float32 ('f'): widened to f64 by the kit, narrowed back exactly
    let scale = c.option_f64("scale").map(|s| s as f32).unwrap_or(1.0 / (d as f32).sqrt());
    let (mut output, mut weights) = (Array::zeros_f32(&[nq, dv]), Array::zeros_f32(&[nq, nk]));
    attend(q.f32().unwrap(), d, k.f32().unwrap(), d, v.f32().unwrap(), dv, mask.map(|m| m.f32().unwrap()), nq, nk, d,
           dv, scale, output.f32_mut(), dv, weights.f32_mut());
    Ok(vec![("output".into(), output), ("weights".into(), weights)])
}

/// x (n x din) w (din x dout) + b
fn project(x: &Array, w: &Array, b: Option<&Array>) -> Vec<f32> {
    let (n, din, dout) = (x.shape[0], x.shape[1], w.shape[1]);
    let (xs, ws) = (x.f32().unwrap(), w.f32().unwrap());
    let mut y = vec![0.0f32; n * dout];
    for i in 0..n {
        for j in 0..dout {
            let s: f32 = (0..din).map(|t| xs[i * din + t] * ws[t * dout + j]).sum();
            y[i * dout + j] = s + b.map_or(0.0, |b| b.f32().unwrap()[j]);
        }
    }
    y
}

fn multi_head_attention(c: &Call) -> Result<Outputs, String> {
    let (query, key, value) = (c.f32_array("query")?, c.f32_array("key")?, c.f32_array("value")?);
    let heads = c.option_i64("num_heads").ok_or("multi_head_attention: num_heads is absent")? as usize;
    let (nq, dm, nk) = (query.shape[0], query.shape[1], key.shape[0]);
    if heads == 0 || dm % heads != 0 {
        return Err(format!("num_heads={} must divide d_model={}", heads, dm));
    }
    let dh = dm / heads;
    let q = project(query, c.f32_array("w_q")?, c.optional_f32_array("b_q")?);
    let k = project(key, c.f32_array("w_k")?, c.optional_f32_array("b_k")?);
    let v = project(value, c.f32_array("w_v")?, c.optional_f32_array("b_v")?);
    let mask = c.optional_f32_array("mask")?.map(|m| m.f32().unwrap());
    let mut concat = Array::zeros_f32(&[nq, dm]);
    let mut weights = Array::zeros_f32(&[heads, nq, nk]);
    for h in 0..heads {
        attend(&q[h * dh..], dm, &k[h * dh..], dm, &v[h * dh..], dm, mask, nq, nk, dh, dh, 1.0 / (dh as f32).sqrt(),
               &mut concat.f32_mut()[h * dh..], dm, &mut weights.f32_mut()[h * nq * nk..(h + 1) * nq * nk]);
    }
    let out = project(&concat, c.f32_array("w_o")?, c.optional_f32_array("b_o")?);
    Ok(vec![("output".into(), Array { shape: vec![nq, dm], data: Data::F32(out) }), ("weights".into(), weights)])
}

fn main() {
    std::process::exit(attention_port::serve(
        "Rust kit walkthrough port in float32 1.0",
        &[
            ("softmax", softmax),
            ("scaled_dot_product_attention", scaled_dot_product_attention),
            ("multi_head_attention", multi_head_attention),
        ],
        "float32",
        "zeros",
    ))
}
