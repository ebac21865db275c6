//! A walkthrough port with the Rust kit: softmax, scaled_dot_product_attention and
//! multi_head_attention at float64, row-major and 0-based (the reference's layout).
//!
//!     attention-ports verify --port rs=ports/kits/rust/example/port.toml   (builds it with rustc)
#[path = "../attention_port.rs"]
mod attention_port;
use attention_port::{Array, Call, Outputs};

/// Along the last axis, in place; an all -inf row comes back NaN (0/0), as the reference's does.
fn softmax_rows(y: &mut [f64], n: usize) {
    for row in y.chunks_mut(n.max(1)) {
        let peak = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let mut sum = 0.0;
        for v in row.iter_mut() {
            *v = (*v - peak).exp();
            sum += *v;
        }
        row.iter_mut().for_each(|v| *v /= sum);
    }
}

fn softmax(c: &Call) -> Result<Outputs, String> {
    let x = c.f64_array("x")?;
    let xs = x.f64().unwrap();
    if xs.iter().any(|v| v.is_nan() || *v == f64::INFINITY) {
        return Err("softmax: x contains NaN or +Inf".into());
    }
    let mut y = x.clone();
    softmax_rows(y.f64_mut(), *x.shape.last().ok_or("softmax: x must have at least one dimension")?);
    Ok(vec![("y".into(), y)])
}

/// One head over column blocks (strides sq, sk, sv, so): out (nq x dv), w (nq x nk). A query whose
/// every score is -inf gets zero weights and output (masked_query "zeros").
#[allow(clippy::too_many_arguments)]
fn attend(q: &[f64], sq: usize, k: &[f64], sk: usize, v: &[f64], sv: usize, mask: Option<&[f64]>, nq: usize,
          nk: usize, d: usize, dv: usize, scale: f64, out: &mut [f64], so: usize, w: &mut [f64]) {
    for i in 0..nq {
        let wi = &mut w[i * nk..(i + 1) * nk];
        for j in 0..nk {
            let mut s = 0.0;
            for t in 0..d {
                s += q[i * sq + t] * k[j * sk + t];
            }
            s *= scale;
            if let Some(m) = mask {
                s += m[i * nk + j];
            }
            wi[j] = s;
        }
        if wi.iter().all(|s| *s == f64::NEG_INFINITY) {
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
    let (q, k, v) = (c.f64_array("q")?, c.f64_array("k")?, c.f64_array("v")?);
    let mask = c.optional_f64_array("mask")?;
    let (nq, d, nk, dv) = (q.shape[0], q.shape[1], k.shape[0], v.shape[1]);
    if k.shape[1] != d || v.shape[0] != nk {
        return Err(format!("q {:?}, k {:?}, v {:?} do not fit", q.shape, k.shape, v.shape));
    }
    let scale = c.option_f64("scale").unwrap_or(1.0 / (d as f64).sqrt());
    let (mut output, mut weights) = (Array::zeros_f64(&[nq, dv]), Array::zeros_f64(&[nq, nk]));
    attend(q.f64().unwrap(), d, k.f64().unwrap(), d, v.f64().unwrap(), dv, mask.map(|m| m.f64().unwrap()), nq, nk, d,
           dv, scale, output.f64_mut(), dv, weights.f64_mut());
    Ok(vec![("output".into(), output), ("weights".into(), weights)])
}

/// x (n x din) w (din x dout) + b
fn project(x: &Array, w: &Array, b: Option<&Array>) -> Vec<f64> {
    let (n, din, dout) = (x.shape[0], x.shape[1], w.shape[1]);
    let (xs, ws) = (x.f64().unwrap(), w.f64().unwrap());
    let mut y = vec![0.0; n * dout];
    for i in 0..n {
        for j in 0..dout {
            let s: f64 = (0..din).map(|t| xs[i * din + t] * ws[t * dout + j]).sum();
            y[i * dout + j] = s + b.map_or(0.0, |b| b.f64().unwrap()[j]);
        }
    }
    y
}

fn multi_head_attention(c: &Call) -> Result<Outputs, String> {
    let (query, key, value) = (c.f64_array("query")?, c.f64_array("key")?, c.f64_array("value")?);
    let heads = c.option_i64("num_heads").ok_or("multi_head_attention: num_heads is absent")? as usize;
    let (nq, dm, nk) = (query.shape[0], query.shape[1], key.shape[0]);
    if heads == 0 || dm % heads != 0 {
        return Err(format!("num_heads={} must divide d_model={}", heads, dm));
    }
    let dh = dm / heads;
    let q = project(query, c.f64_array("w_q")?, c.optional_f64_array("b_q")?);
    let k = project(key, c.f64_array("w_k")?, c.optional_f64_array("b_k")?);
    let v = project(value, c.f64_array("w_v")?, c.optional_f64_array("b_v")?);
    let mask = c.optional_f64_array("mask")?.map(|m| m.f64().unwrap());
    let mut concat = Array::zeros_f64(&[nq, dm]);
    let mut weights = Array::zeros_f64(&[heads, nq, nk]);
    for h in 0..heads {
        attend(&q[h * dh..], dm, &k[h * dh..], dm, &v[h * dh..], dm, mask, nq, nk, dh, dh, 1.0 / (dh as f64).sqrt(),
               &mut concat.f64_mut()[h * dh..], dm, &mut weights.f64_mut()[h * nq * nk..(h + 1) * nq * nk]);
    }
    let out = project(&concat, c.f64_array("w_o")?, c.optional_f64_array("b_o")?);
    Ok(vec![("output".into(), Array { shape: vec![nq, dm], data: attention_port::Data::F64(out) }),
            ("weights".into(), weights)])
}

fn main() {
    std::process::exit(attention_port::serve(
        "Rust kit walkthrough port 1.0",
        &[
            ("softmax", softmax),
            ("scaled_dot_product_attention", scaled_dot_product_attention),
            ("multi_head_attention", multi_head_attention),
        ],
        "float64",
        "zeros",
    ))
}
