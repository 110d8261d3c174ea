//! Typed op constructors.
//!
//! Each method resolves its ggml entry point from the build (a build too old for it answers
//! [`GraphError::MissingOp`] with the symbol's name), converts its arguments, and records the
//! result with the element type the op gives where that is fixed.
//!
//! Adding an op: declare its C signature in `ffi.rs`'s `op_table!`, then add one line to
//! `simple_ops!` below (`name => symbol(args) -> same(a) | fixed(F32) | of(ty) | unknown();`).
//! Ops with preconditions worth checking before ggml asserts them get a hand-written method
//! further down.

use std::ffi::{c_int, c_void};

use crate::error::GraphError;
use crate::graph::{Graph, Tensor, ViewState};
use crate::types::{PoolOp, Prec, ScaleMode, SortOrder, TriType, Type};
use crate::{GluOp, UnaryOp};

/// How an op method argument crosses into C, and how it is written in C source (a
/// [`Recording`](crate::Recording)'s statements).
pub(crate) trait Arg: Copy {
    type C;
    fn c(self, g: &Graph) -> Result<Self::C, GraphError>;
    fn text(self, g: &Graph) -> String;
}

impl Arg for Tensor {
    type C = *mut c_void;
    fn c(self, g: &Graph) -> Result<Self::C, GraphError> {
        g.ptr(self)
    }
    fn text(self, g: &Graph) -> String {
        g.c_tensor(self)
    }
}

impl Arg for Option<Tensor> {
    type C = *mut c_void;
    fn c(self, g: &Graph) -> Result<Self::C, GraphError> {
        self.map_or(Ok(std::ptr::null_mut()), |t| g.ptr(t))
    }
    fn text(self, g: &Graph) -> String {
        self.map_or_else(|| "NULL".to_string(), |t| g.c_tensor(t))
    }
}

/// A float as C source, exactly: the program defines `kedge_f32(bits)`.
pub(crate) fn c_f32(x: f32) -> String {
    format!("kedge_f32(0x{:08x}u) /* {x:e} */", x.to_bits())
}

/// A ggml type as C source.
pub(crate) fn c_type(t: Type) -> String {
    format!("(enum ggml_type) {} /* {} */", t.raw(), t.name())
}

macro_rules! plain_arg {
    ($($t:ty => |$x:ident| $text:expr),*) => { $(
        impl Arg for $t {
            type C = $t;
            fn c(self, _: &Graph) -> Result<$t, GraphError> { Ok(self) }
            fn text(self, _: &Graph) -> String { let $x = self; $text }
        }
    )* };
}
plain_arg!(
    f32 => |x| c_f32(x),
    i32 => |x| x.to_string(),
    i64 => |x| format!("{x}LL"),
    u32 => |x| format!("{x}u"),
    usize => |x| format!("(size_t) {x}ull"),
    bool => |x| x.to_string()
);

macro_rules! enum_arg {
    ($($t:ty),*) => { $(
        impl Arg for $t {
            type C = c_int;
            fn c(self, _: &Graph) -> Result<c_int, GraphError> { Ok(self as c_int) }
            fn text(self, _: &Graph) -> String { format!("{} /* {:?} */", self as c_int, self) }
        }
    )* };
}
enum_arg!(TriType, SortOrder, PoolOp, ScaleMode);

impl Arg for Type {
    type C = c_int;
    fn c(self, _: &Graph) -> Result<c_int, GraphError> {
        Ok(self.raw())
    }
    fn text(self, _: &Graph) -> String {
        c_type(self)
    }
}

macro_rules! out_ty {
    ($g:ident, same($a:ident)) => {
        $g.ty_of($a)
    };
    ($g:ident, fixed($t:ident)) => {
        Some(Type::$t)
    };
    ($g:ident, of($a:ident)) => {
        Some($a)
    };
    ($g:ident, unknown()) => {
        None
    };
}

impl Graph {
    /// The op's entry point, or [`GraphError::MissingOp`] naming it.
    pub(crate) fn op_fn<F: Copy>(&self, f: Option<F>, sym: &'static str) -> Result<F, GraphError> {
        f.ok_or(GraphError::MissingOp(sym))
    }

    /// A new op result (owning its memory, unless ggml made it a view).
    pub(crate) fn push_op(
        &mut self,
        r: *mut c_void,
        sym: &'static str,
        ty: Option<Type>,
    ) -> Result<Tensor, GraphError> {
        self.push(r, sym, ty, None, ViewState::Own)
    }

    fn require(
        &self,
        ok: bool,
        op: &'static str,
        reason: impl FnOnce() -> String,
    ) -> Result<(), GraphError> {
        if ok {
            Ok(())
        } else {
            Err(GraphError::Shape {
                op,
                reason: reason(),
            })
        }
    }
}

macro_rules! simple_ops {
    ($( $(#[$doc:meta])* $name:ident => $sym:ident ( $($arg:ident : $ty:ty),* ) -> $rule:ident ( $($rarg:ident)? ) ; )*) => {
        impl Graph { $(
            $(#[$doc])*
            #[doc = concat!("\n\n`", stringify!($sym), "`.")]
            #[allow(clippy::too_many_arguments)]
            pub fn $name(&mut self, $($arg: $ty),*) -> Result<Tensor, GraphError> {
                let f = self.op_fn(self.ops_table().$sym, stringify!($sym))?;
                let out: Option<Type> = out_ty!(self, $rule($($rarg)?));
                self.reserve()?;
                if self.is_recording() {
                    let args: Vec<String> = vec![$( Arg::text($arg, self) ),*];
                    self.note_call(stringify!($sym), &args);
                }
                let ctx = self.ctx();
                // SAFETY: the entry point has the signature ffi.rs declares from ggml.h; every
                // tensor is a live tensor of this context; room for the result was reserved.
                let r = unsafe { f(ctx, $( Arg::c($arg, self)? ),*) };
                self.push_op(r, stringify!($sym), out)
            }
        )* }
    };
}

simple_ops! {
    /// A copy of `a`.
    dup => ggml_dup(a: Tensor) -> same(a);
    /// `a - b`, `b` broadcast over `a`.
    sub => ggml_sub(a: Tensor, b: Tensor) -> same(a);
    /// `a / b`, `b` broadcast over `a`.
    div => ggml_div(a: Tensor, b: Tensor) -> same(a);
    /// dst = a; dst's view (nb1, nb2, nb3, offset) += b.
    acc => ggml_acc(a: Tensor, b: Tensor, nb1: usize, nb2: usize, nb3: usize, offset: usize) -> same(a);
    /// `a²`, element by element.
    sqr => ggml_sqr(a: Tensor) -> same(a);
    /// The square root, element by element.
    sqrt => ggml_sqrt(a: Tensor) -> same(a);
    /// The natural logarithm, element by element.
    log => ggml_log(a: Tensor) -> same(a);
    /// The sine, element by element.
    sin => ggml_sin(a: Tensor) -> same(a);
    /// The cosine, element by element.
    cos => ggml_cos(a: Tensor) -> same(a);
    /// The sum of all elements (one element).
    sum => ggml_sum(a: Tensor) -> same(a);
    /// Row sums: `[1, ne1, ne2, ne3]`.
    sum_rows => ggml_sum_rows(a: Tensor) -> same(a);
    /// Row means, f32.
    mean => ggml_mean(a: Tensor) -> fixed(F32);
    /// Index of each row's maximum, i32.
    argmax => ggml_argmax(a: Tensor) -> fixed(I32);
    /// The number of equal elements, one i64.
    count_equal => ggml_count_equal(a: Tensor, b: Tensor) -> fixed(I64);
    /// `a` repeated to `b`'s shape.
    repeat => ggml_repeat(a: Tensor, b: Tensor) -> same(a);
    /// `a` repeated to the given shape.
    repeat_4d => ggml_repeat_4d(a: Tensor, ne0: i64, ne1: i64, ne2: i64, ne3: i64) -> same(a);
    /// Sums `a`'s repetitions into `b`'s shape.
    repeat_back => ggml_repeat_back(a: Tensor, b: Tensor) -> same(a);
    /// `a` converted to `ty`.
    cast => ggml_cast(a: Tensor, ty: Type) -> of(ty);
    /// Leaky ReLU; `inplace` makes the result a view of `a`.
    leaky_relu => ggml_leaky_relu(a: Tensor, negative_slope: f32, inplace: bool) -> same(a);
    /// `s*a + b`.
    scale_bias => ggml_scale_bias(a: Tensor, s: f32, b: f32) -> same(a);
    /// Normalizes each row to mean 0, variance 1.
    norm => ggml_norm(a: Tensor, eps: f32) -> same(a);
    /// Divides each row by its root mean square.
    rms_norm => ggml_rms_norm(a: Tensor, eps: f32) -> same(a);
    /// Divides each row by its L2 norm.
    l2_norm => ggml_l2_norm(a: Tensor, eps: f32) -> same(a);
    /// Normalizes over `ne0*ne1*(ne2/n_groups)` groups.
    group_norm => ggml_group_norm(a: Tensor, n_groups: i32, eps: f32) -> same(a);
    /// Indirect matrix product: `experts` (ggml's `as`) holds one matrix per expert, `ids` picks them.
    mul_mat_id => ggml_mul_mat_id(experts: Tensor, b: Tensor, ids: Tensor) -> fixed(F32);
    /// Sum of outer products: `a` `[m, k]` and `b` `[n, k]` give f32 `[m, n]`, summed over `k`
    /// (batch dims taken from `b`).
    out_prod => ggml_out_prod(a: Tensor, b: Tensor) -> fixed(F32);
    /// `s*a`.
    scale => ggml_scale(a: Tensor, s: f32) -> same(a);
    /// Sets elements above the diagonal (past `n_past`) to -inf.
    diag_mask_inf => ggml_diag_mask_inf(a: Tensor, n_past: i32) -> same(a);
    /// The gradient of `soft_max_ext`: `a` is dy, `b` the softmax output.
    soft_max_ext_back => ggml_soft_max_ext_back(a: Tensor, b: Tensor, scale: f32, max_bias: f32) -> same(a);
    /// Image to columns (for a convolution as a matrix product).
    im2col => ggml_im2col(a: Tensor, b: Tensor, s0: i32, s1: i32, p0: i32, p1: i32, d0: i32, d1: i32, is_2d: bool, dst_type: Type) -> of(dst_type);
    /// 1-D pooling along ne0 (window `k0`, stride `s0`, `p0` padding each side), f32.
    pool_1d => ggml_pool_1d(a: Tensor, op: PoolOp, k0: i32, s0: i32, p0: i32) -> fixed(F32);
    /// 2-D pooling; the result has 2*p0, 2*p1 padding.
    pool_2d => ggml_pool_2d(a: Tensor, op: PoolOp, k0: i32, k1: i32, s0: i32, s1: i32, p0: f32, p1: f32) -> fixed(F32);
    /// Multiplies ne0 and ne1 by `scale_factor` (> 1).
    upscale => ggml_upscale(a: Tensor, scale_factor: i32, mode: ScaleMode) -> same(a);
    /// Resamples to the given shape; `mode` is a [`ScaleMode`] or-ed with `SCALE_FLAG_*`.
    interpolate => ggml_interpolate(a: Tensor, ne0: i64, ne1: i64, ne2: i64, ne3: i64, mode: u32) -> same(a);
    /// Pads each dimension's end with zeros.
    pad => ggml_pad(a: Tensor, p0: i32, p1: i32, p2: i32, p3: i32) -> same(a);
    /// Pads each dimension on both sides with zeros.
    pad_ext => ggml_pad_ext(a: Tensor, lp0: i32, rp0: i32, lp1: i32, rp1: i32, lp2: i32, rp2: i32, lp3: i32, rp3: i32) -> same(a);
    /// A tensor like `a` filled with `c`.
    fill_value => ggml_fill(a: Tensor, c: f32) -> same(a);
    /// Sinusoidal timestep embeddings, `[dim, n]` f32.
    timestep_embedding => ggml_timestep_embedding(timesteps: Tensor, dim: i32, max_period: i32) -> fixed(F32);
    /// The indices that sort each row, i32.
    argsort => ggml_argsort(a: Tensor, order: SortOrder) -> fixed(I32);
    /// Flash attention (see ggml.h for the shapes); the result is permuted, f32.
    flash_attn_ext => ggml_flash_attn_ext(q: Tensor, k: Tensor, v: Tensor, mask: Option<Tensor>, scale: f32, max_bias: f32, logit_softcap: f32) -> fixed(F32);
    /// Mamba's causal 1-D convolution: `sx` `[d_conv - 1 + n_t, d_inner, n_s]` (the carried
    /// state before the tokens) by the kernels `c` `[d_conv, d_inner]`, giving `[d_inner, n_t, n_s]`.
    ssm_conv => ggml_ssm_conv(sx: Tensor, c: Tensor) -> fixed(F32);
    /// Mamba's selective scan; `k` (ggml's `K`) is how many state snapshots to keep.
    ssm_scan => ggml_ssm_scan(s: Tensor, x: Tensor, dt: Tensor, a: Tensor, b: Tensor, c: Tensor, ids: Tensor, k: i64) -> fixed(F32);
    /// RWKV-6's WKV time mixing over `k`, `v`, `r`, the decays `tf`, `td`, and the carried `state`.
    rwkv_wkv6 => ggml_rwkv_wkv6(k: Tensor, v: Tensor, r: Tensor, tf: Tensor, td: Tensor, state: Tensor) -> fixed(F32);
    /// Gated linear attention over `k`, `v`, `q` with gates `g` and the carried `state`; `scale`
    /// multiplies the output.
    gated_linear_attn => ggml_gated_linear_attn(k: Tensor, v: Tensor, q: Tensor, g: Tensor, state: Tensor, scale: f32) -> fixed(F32);
    /// RWKV-7's WKV time mixing over `r`, the decays `w`, `k`, `v`, the in-context learning
    /// vectors `a` and `b`, and the carried `state`.
    rwkv_wkv7 => ggml_rwkv_wkv7(r: Tensor, w: Tensor, k: Tensor, v: Tensor, a: Tensor, b: Tensor, state: Tensor) -> fixed(F32);
    /// The gated delta rule over `q`, `k`, `v` with gates `g` (one per head, or one per
    /// element of a head), write strengths `beta` and the carried `state`; `k_snapshots` (ggml's
    /// `K`) is how many of the last states to keep.
    gated_delta_net => ggml_gated_delta_net(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: Tensor, k_snapshots: i64) -> fixed(F32);
    /// SwiGLU with OpenAI's clamp (`alpha`, `limit`), gate in `b`.
    swiglu_oai => ggml_swiglu_oai(a: Tensor, b: Tensor, alpha: f32, limit: f32) -> same(a);
    /// The gradient of SiLU: `a` is x, `b` the gradient of the output.
    silu_back => ggml_silu_back(a: Tensor, b: Tensor) -> same(a);
    /// The gradient of `rms_norm`: `a` is the gradient of the output, `b` the forward input.
    rms_norm_back => ggml_rms_norm_back(a: Tensor, b: Tensor, eps: f32) -> same(a);
    /// xIELU, element by element (its four constants as the model stores them).
    xielu => ggml_xielu(a: Tensor, alpha_n: f32, alpha_p: f32, beta: f32, eps: f32) -> same(a);
    /// `a` `[n, 1, ne2, ne3]` as the diagonal of `[n, n, ne2, ne3]` matrices.
    diag => ggml_diag(a: Tensor) -> same(a);
    /// A copy of `a` with `b` written into its view (`nb1`, `nb2`, `nb3`, byte `offset`).
    set => ggml_set(a: Tensor, b: Tensor, nb1: usize, nb2: usize, nb3: usize, offset: usize) -> same(a);
    /// `b` written into `a`'s view in place; the result is a view of `a`.
    set_inplace => ggml_set_inplace(a: Tensor, b: Tensor, nb1: usize, nb2: usize, nb3: usize, offset: usize) -> same(a);
    /// Pads `ne0` by reflection: `p0` values before, `p1` after (each < ne0).
    pad_reflect_1d => ggml_pad_reflect_1d(a: Tensor, p0: i32, p1: i32) -> same(a);
    /// Solves `a x = b` for triangular `a` `[n, n, ...]`, `b` `[k, n, ...]`.
    solve_tri => ggml_solve_tri(a: Tensor, b: Tensor, left: bool, lower: bool, uni: bool) -> same(b);
    /// The gradient of `get_rows`: sums the rows of `a` into the rows `b` names, of `c`'s shape.
    get_rows_back => ggml_get_rows_back(a: Tensor, b: Tensor, c: Tensor) -> same(c);
    /// `start, start + step, ...` below `stop`, f32 (no input).
    arange => ggml_arange(start: f32, stop: f32, step: f32) -> fixed(F32);
    /// DeepSeek's sparse-attention indexer: per token and key, the weighted sum over heads of
    /// `relu(q . k)`, plus the mask; f32 `[n_kv, n_tokens, 1, n_streams]`.
    lightning_indexer => ggml_lightning_indexer(q: Tensor, k: Tensor, weights: Tensor, mask: Tensor) -> fixed(F32);
    /// The cross-entropy loss of logits `a` against label probabilities `b` (one element).
    cross_entropy_loss => ggml_cross_entropy_loss(a: Tensor, b: Tensor) -> same(a);
    /// Its gradient: `a` the loss' gradient (one element), `b` the logits, `c` the labels.
    cross_entropy_loss_back => ggml_cross_entropy_loss_back(a: Tensor, b: Tensor, c: Tensor) -> same(b);
    /// One AdamW step on parameter `a` (marked with [`Graph::set_param`]), in place: the
    /// moments `m`, `v` are updated too; `params` holds its seven f32 hyperparameters.
    opt_step_adamw => ggml_opt_step_adamw(a: Tensor, grad: Tensor, m: Tensor, v: Tensor, params: Tensor) -> same(a);
    /// One SGD step on parameter `a`, in place; `params` holds the learning rate and weight decay.
    opt_step_sgd => ggml_opt_step_sgd(a: Tensor, grad: Tensor, params: Tensor) -> same(a);
    /// Depthwise 2-D convolution of `b` `[W, H, C, N]` by one kernel a channel, `a`
    /// `[KW, KH, 1, C]`; a channel-contiguous `b` gives a result laid out the same way.
    conv_2d_dw_direct => ggml_conv_2d_dw_direct(a: Tensor, b: Tensor, s0: i32, s1: i32, p0: i32, p1: i32, d0: i32, d1: i32) -> same(b);
    /// 2-D convolution of `b` `[W, H, IC, N]` by the kernel `a` `[KW, KH, IC, OC]`, computed
    /// directly (no im2col), giving `[OW, OH, OC, N]`.
    conv_2d_direct => ggml_conv_2d_direct(a: Tensor, b: Tensor, s0: i32, s1: i32, p0: i32, p1: i32, d0: i32, d1: i32) -> same(b);
    /// 3-D convolution of `b` `[W, H, D, IC*N]` by the kernel `a` `[KW, KH, KD, IC*OC]`,
    /// computed directly (no im2col node), giving f32 `[OW, OH, OD, OC*N]`.
    conv_3d_direct => ggml_conv_3d_direct(a: Tensor, b: Tensor, s0: i32, s1: i32, s2: i32, p0: i32, p1: i32, p2: i32, d0: i32, d1: i32, d2: i32, c: i32, n: i32, oc: i32) -> fixed(F32);
    /// 3-D image to columns: `b` `[W, H, D, N*IC]` by the kernel shape of `a`
    /// `[KW, KH, KD, OC*IC]` gives `[KW*KH*KD*IC, OW, OH, OD*N]`.
    im2col_3d => ggml_im2col_3d(a: Tensor, b: Tensor, ic: i64, s0: i32, s1: i32, s2: i32, p0: i32, p1: i32, p2: i32, d0: i32, d1: i32, d2: i32, dst_type: Type) -> of(dst_type);
    /// Columns `a` `[K*OC, T_in]` added back into a 1-D signal `[T_out, OC]` at stride `s0`,
    /// `p0` cropped from both ends (a transposed convolution after its matrix product).
    col2im_1d => ggml_col2im_1d(a: Tensor, s0: i32, oc: i32, p0: i32) -> same(a);
}

/// Parameters of `ggml_rope_ext` beyond its tensors.
#[derive(Clone, Copy, Debug)]
pub struct RopeParams {
    /// How many leading dimensions of each head are rotated.
    pub(crate) n_dims: i32,
    /// `rope_mode::NORMAL` or `NEOX` (the multi-section modes need `ggml_rope_multi`).
    pub(crate) mode: i32,
    /// The context length the model was trained with (YaRN).
    pub(crate) n_ctx_orig: i32,
    /// The base of the rotation frequencies.
    pub(crate) freq_base: f32,
    /// Position scaling (1: none).
    pub(crate) freq_scale: f32,
    /// YaRN's extrapolation mix (0: off).
    pub(crate) ext_factor: f32,
    /// Scales the rotated values' magnitude.
    pub(crate) attn_factor: f32,
    /// YaRN's high correction dimension.
    pub(crate) beta_fast: f32,
    /// YaRN's low correction dimension.
    pub(crate) beta_slow: f32,
}

impl RopeParams {
    /// Plain RoPE over `n_dims` with base 10000 and YaRN off (ggml.h's defaults).
    pub fn new(n_dims: i32, mode: i32) -> Self {
        RopeParams {
            n_dims,
            mode,
            n_ctx_orig: 0,
            freq_base: 10000.0,
            freq_scale: 1.0,
            ext_factor: 0.0,
            attn_factor: 1.0,
            beta_fast: 0.0,
            beta_slow: 0.0,
        }
    }
}

// Ops with checks before ggml sees them, or with a result that is a view.
impl Graph {
    fn binary(
        &mut self,
        sym: &'static str,
        f: Option<unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_void) -> *mut c_void>,
        a: Tensor,
        b: Tensor,
    ) -> Result<Tensor, GraphError> {
        let f = self.op_fn(f, sym)?;
        let (pa, pb) = (self.ptr(a)?, self.ptr(b)?);
        // SAFETY: live tensors.
        let ok = unsafe { (self.api().ggml_can_repeat)(pb, pa) };
        self.require(ok, sym, || {
            format!(
                "b {:?} cannot be broadcast to a {:?}",
                self.shape(b).ok(),
                self.shape(a).ok()
            )
        })?;
        let ty = self.ty_of(a);
        self.reserve()?;
        self.note_call(sym, &[self.c_tensor(a), self.c_tensor(b)]);
        // SAFETY: declared signature; live tensors; broadcastable (ggml's assert); room reserved.
        let r = unsafe { f(self.ctx(), pa, pb) };
        self.push_op(r, sym, ty)
    }

    /// `a + b`, `b` broadcast over `a`. `ggml_add`.
    pub fn add(&mut self, a: Tensor, b: Tensor) -> Result<Tensor, GraphError> {
        self.binary("ggml_add", self.ops_table().ggml_add, a, b)
    }

    /// `a * b`, `b` broadcast over `a`. `ggml_mul`.
    pub fn mul(&mut self, a: Tensor, b: Tensor) -> Result<Tensor, GraphError> {
        self.binary("ggml_mul", self.ops_table().ggml_mul, a, b)
    }

    /// `dst[i0, i1, i2] = a[i0, i1, i2] + b[i0, ids[i1, i2]]`: a per-expert bias. `ids` is i32
    /// `[ne1(a), ne2(a)]`, often a view of a wider id tensor. `ggml_add_id`.
    pub fn add_id(&mut self, a: Tensor, b: Tensor, ids: Tensor) -> Result<Tensor, GraphError> {
        const OP: &str = "ggml_add_id";
        let f = self.op_fn(self.ops_table().ggml_add_id, OP)?;
        let (sa, sb, si) = (self.shape(a)?, self.shape(b)?, self.shape(ids)?);
        self.require(sa[0] == sb[0], OP, || {
            format!("a's rows ({}) and b's ({}) differ", sa[0], sb[0])
        })?;
        self.require(sa[1] == si[0] && sa[2] == si[1], OP, || {
            format!("ids {si:?} must be [ne1, ne2] of a {sa:?}")
        })?;
        self.require(
            matches!(self.ty_of(ids), Some(Type::I32) | None),
            OP,
            || "ids must be i32".into(),
        )?;
        let (pa, pb, pi) = (self.ptr(a)?, self.ptr(b)?, self.ptr(ids)?);
        let ty = self.ty_of(a);
        self.reserve()?;
        let args = [self.c_tensor(a), self.c_tensor(b), self.c_tensor(ids)];
        self.note_call(OP, &args);
        // SAFETY: declared signature; shapes as ggml asserts them; room reserved.
        let r = unsafe { f(self.ctx(), pa, pb, pi) };
        self.push_op(r, OP, ty)
    }

    /// Matrix product: `a` `[k, n, ...]` times `b` `[k, m, ...]` gives f32 `[n, m, ...]`
    /// (`b`'s batch dims a multiple of `a`'s). `ggml_mul_mat`.
    pub fn mul_mat(&mut self, a: Tensor, b: Tensor) -> Result<Tensor, GraphError> {
        const OP: &str = "ggml_mul_mat";
        let f = self.op_fn(self.ops_table().ggml_mul_mat, OP)?;
        let (sa, sb) = (self.shape(a)?, self.shape(b)?);
        let ok =
            sa[0] == sb[0] && sa[2] > 0 && sa[3] > 0 && sb[2] % sa[2] == 0 && sb[3] % sa[3] == 0;
        self.require(ok, OP, || {
            format!("a {sa:?} and b {sb:?}: need equal ne0 and b's ne2, ne3 multiples of a's")
        })?;
        let (pa, pb) = (self.ptr(a)?, self.ptr(b)?);
        // SAFETY: a live tensor.
        let transposed = unsafe { (self.api().ggml_is_transposed)(pa) };
        self.require(!transposed, OP, || "a must not be transposed".into())?;
        self.reserve()?;
        self.note_call(OP, &[self.c_tensor(a), self.c_tensor(b)]);
        // SAFETY: declared signature; ggml's asserts checked above; room reserved.
        let r = unsafe { f(self.ctx(), pa, pb) };
        self.push_op(r, OP, Some(Type::F32))
    }

    /// Marks `t` as a trained parameter (the optimizer steps assert it). `ggml_set_param`.
    pub fn set_param(&mut self, t: Tensor) -> Result<(), GraphError> {
        let f = self.op_fn(self.ops_table().ggml_set_param, "ggml_set_param")?;
        let p = self.ptr(t)?;
        // SAFETY: declared signature; a live tensor.
        unsafe { f(p) };
        let stmt = format!("ggml_set_param({});", self.c_tensor(t));
        self.note_stmt(stmt);
        Ok(())
    }

    /// Tells a matrix product that its first argument is a (normalized) Hadamard matrix, so a
    /// backend may run a fast Walsh-Hadamard transform instead. `ggml_mul_mat_set_hint` with
    /// `GGML_HINT_SRC0_IS_HADAMARD`.
    pub fn hint_hadamard(&mut self, node: Tensor) -> Result<(), GraphError> {
        const HINT_SRC0_IS_HADAMARD: c_int = 1;
        let f = self.op_fn(
            self.ops_table().ggml_mul_mat_set_hint,
            "ggml_mul_mat_set_hint",
        )?;
        let p = self.ptr(node)?;
        // SAFETY: declared signature; a live tensor; a value of ggml.h's enum ggml_op_hint.
        unsafe { f(p, HINT_SRC0_IS_HADAMARD) };
        let stmt = format!(
            "ggml_mul_mat_set_hint({}, {HINT_SRC0_IS_HADAMARD});",
            self.c_tensor(node)
        );
        self.note_stmt(stmt);
        Ok(())
    }

    /// Sets a matrix product's precision. `ggml_mul_mat_set_prec`.
    pub fn set_mul_mat_prec(&mut self, node: Tensor, prec: Prec) -> Result<(), GraphError> {
        let f = self.op_fn(
            self.ops_table().ggml_mul_mat_set_prec,
            "ggml_mul_mat_set_prec",
        )?;
        let p = self.ptr(node)?;
        // SAFETY: declared signature; a live tensor.
        unsafe { f(p, prec as c_int) };
        let stmt = format!(
            "ggml_mul_mat_set_prec({}, {});",
            self.c_tensor(node),
            prec as c_int
        );
        self.note_stmt(stmt);
        Ok(())
    }

    /// `softmax(a*scale + mask*slope)` per row, with ALiBi slopes from `max_bias` (0: none).
    /// The mask (f32 or f16, contiguous) is `[ne0, >= ne1, ne2/k, ne3/k]`. `ggml_soft_max_ext`.
    pub fn soft_max_ext(
        &mut self,
        a: Tensor,
        mask: Option<Tensor>,
        scale: f32,
        max_bias: f32,
    ) -> Result<Tensor, GraphError> {
        const OP: &str = "ggml_soft_max_ext";
        let f = self.op_fn(self.ops_table().ggml_soft_max_ext, OP)?;
        let pa = self.ptr(a)?;
        let api = self.api();
        // SAFETY: a live tensor.
        self.require(unsafe { (api.ggml_is_contiguous)(pa) }, OP, || {
            "a must be contiguous".into()
        })?;
        let mut pm = std::ptr::null_mut();
        if let Some(m) = mask {
            pm = self.ptr(m)?;
            let (sa, sm) = (self.shape(a)?, self.shape(m)?);
            // SAFETY: a live tensor.
            self.require(unsafe { (api.ggml_is_contiguous)(pm) }, OP, || {
                "the mask must be contiguous".into()
            })?;
            self.require(
                matches!(self.ty_of(m), Some(Type::F32 | Type::F16) | None),
                OP,
                || "the mask must be f32 or f16".into(),
            )?;
            let ok = sm[0] == sa[0]
                && sm[1] >= sa[1]
                && sm[2] > 0
                && sm[3] > 0
                && sa[2] % sm[2] == 0
                && sa[3] % sm[3] == 0;
            self.require(ok, OP, || format!("mask {sm:?} does not fit a {sa:?}"))?;
        } else {
            self.require(max_bias == 0.0, OP, || "max_bias needs a mask".into())?;
        }
        let ty = self.ty_of(a);
        self.reserve()?;
        if self.is_recording() {
            let args = [
                self.c_tensor(a),
                Arg::text(mask, self),
                c_f32(scale),
                c_f32(max_bias),
            ];
            self.note_call(OP, &args);
        }
        // SAFETY: declared signature; ggml's asserts checked above; room reserved.
        let r = unsafe { f(self.ctx(), pa, pm, scale, max_bias) };
        self.push_op(r, OP, ty)
    }

    /// Adds attention sinks to a `soft_max_ext` node. `ggml_soft_max_add_sinks`.
    pub fn soft_max_add_sinks(&mut self, node: Tensor, sinks: Tensor) -> Result<(), GraphError> {
        let f = self.op_fn(
            self.ops_table().ggml_soft_max_add_sinks,
            "ggml_soft_max_add_sinks",
        )?;
        let (p, s) = (self.ptr(node)?, self.ptr(sinks)?);
        // SAFETY: declared signature; live tensors.
        unsafe { f(p, s) };
        let stmt = format!(
            "ggml_soft_max_add_sinks({}, {});",
            self.c_tensor(node),
            self.c_tensor(sinks)
        );
        self.note_stmt(stmt);
        Ok(())
    }

    /// Sets a flash-attention node's precision. `ggml_flash_attn_ext_set_prec`.
    pub fn set_flash_attn_prec(&mut self, node: Tensor, prec: Prec) -> Result<(), GraphError> {
        let f = self.op_fn(
            self.ops_table().ggml_flash_attn_ext_set_prec,
            "ggml_flash_attn_ext_set_prec",
        )?;
        let p = self.ptr(node)?;
        // SAFETY: declared signature; a live tensor.
        unsafe { f(p, prec as c_int) };
        let stmt = format!(
            "ggml_flash_attn_ext_set_prec({}, {});",
            self.c_tensor(node),
            prec as c_int
        );
        self.note_stmt(stmt);
        Ok(())
    }

    /// Adds attention sinks to a flash-attention node. `ggml_flash_attn_ext_add_sinks`.
    pub fn flash_attn_add_sinks(&mut self, node: Tensor, sinks: Tensor) -> Result<(), GraphError> {
        let f = self.op_fn(
            self.ops_table().ggml_flash_attn_ext_add_sinks,
            "ggml_flash_attn_ext_add_sinks",
        )?;
        let (p, s) = (self.ptr(node)?, self.ptr(sinks)?);
        // SAFETY: declared signature; live tensors.
        unsafe { f(p, s) };
        let stmt = format!(
            "ggml_flash_attn_ext_add_sinks({}, {});",
            self.c_tensor(node),
            self.c_tensor(sinks)
        );
        self.note_stmt(stmt);
        Ok(())
    }

    /// Inclusive prefix sum along rows (f32 only). `ggml_cumsum`.
    pub fn cumsum(&mut self, a: Tensor) -> Result<Tensor, GraphError> {
        const OP: &str = "ggml_cumsum";
        let f = self.op_fn(self.ops_table().ggml_cumsum, OP)?;
        self.require(matches!(self.ty_of(a), Some(Type::F32) | None), OP, || {
            "a must be f32".into()
        })?;
        let pa = self.ptr(a)?;
        self.reserve()?;
        self.note_call(OP, &[self.c_tensor(a)]);
        // SAFETY: declared signature; f32 as ggml asserts; room reserved.
        let r = unsafe { f(self.ctx(), pa) };
        self.push_op(r, OP, Some(Type::F32))
    }

    /// Zeroes what is outside a triangle of each square, contiguous f32 matrix. `ggml_tri`.
    pub fn tri(&mut self, a: Tensor, kind: TriType) -> Result<Tensor, GraphError> {
        const OP: &str = "ggml_tri";
        let f = self.op_fn(self.ops_table().ggml_tri, OP)?;
        let pa = self.ptr(a)?;
        let s = self.shape(a)?;
        self.require(matches!(self.ty_of(a), Some(Type::F32) | None), OP, || {
            "a must be f32".into()
        })?;
        // SAFETY: a live tensor.
        self.require(unsafe { (self.api().ggml_is_contiguous)(pa) }, OP, || {
            "a must be contiguous".into()
        })?;
        self.require(s[0] == s[1], OP, || {
            format!("{s:?} is not square in dims 0 and 1")
        })?;
        self.reserve()?;
        self.note_call(OP, &[self.c_tensor(a), Arg::text(kind, self)]);
        // SAFETY: declared signature; ggml's asserts checked; room reserved.
        let r = unsafe { f(self.ctx(), pa, kind as c_int) };
        self.push_op(r, OP, Some(Type::F32))
    }

    /// Concatenates along `dim` (same type; other dims equal). `ggml_concat`.
    pub fn concat(&mut self, a: Tensor, b: Tensor, dim: i32) -> Result<Tensor, GraphError> {
        const OP: &str = "ggml_concat";
        let f = self.op_fn(self.ops_table().ggml_concat, OP)?;
        self.require((0..4).contains(&dim), OP, || {
            format!("dim {dim} is not 0..4")
        })?;
        let (sa, sb) = (self.shape(a)?, self.shape(b)?);
        let ok = (0..4).all(|d| d == dim as usize || sa[d] == sb[d]);
        self.require(ok, OP, || {
            format!("{sa:?} and {sb:?} differ outside dim {dim}")
        })?;
        let (ta, tb) = (self.ty_of(a), self.ty_of(b));
        self.require(ta.is_none() || tb.is_none() || ta == tb, OP, || {
            "a and b differ in type".into()
        })?;
        let (pa, pb) = (self.ptr(a)?, self.ptr(b)?);
        self.reserve()?;
        self.note_call(OP, &[self.c_tensor(a), self.c_tensor(b), dim.to_string()]);
        // SAFETY: declared signature; ggml's asserts checked; room reserved.
        let r = unsafe { f(self.ctx(), pa, pb, dim) };
        self.push_op(r, OP, ta)
    }

    /// Gathers rows of `a` by the i32 indices in `b` (`[n, ne2(a), ne3(a)]`). `ggml_get_rows`.
    pub fn get_rows(&mut self, a: Tensor, b: Tensor) -> Result<Tensor, GraphError> {
        const OP: &str = "ggml_get_rows";
        let f = self.op_fn(self.ops_table().ggml_get_rows, OP)?;
        let (sa, sb) = (self.shape(a)?, self.shape(b)?);
        self.require(sa[2] == sb[1] && sa[3] == sb[2] && sb[3] == 1, OP, || {
            format!("indices {sb:?} do not fit data {sa:?}")
        })?;
        self.require(matches!(self.ty_of(b), Some(Type::I32) | None), OP, || {
            "indices must be i32".into()
        })?;
        let (pa, pb) = (self.ptr(a)?, self.ptr(b)?);
        // The result is f32 unless a is i32 (ggml.c).
        let ty = match self.ty_of(a) {
            Some(Type::I32) => Some(Type::I32),
            Some(_) => Some(Type::F32),
            None => None,
        };
        self.reserve()?;
        self.note_call(OP, &[self.c_tensor(a), self.c_tensor(b)]);
        // SAFETY: declared signature; ggml's asserts checked; room reserved.
        let r = unsafe { f(self.ctx(), pa, pb) };
        self.push_op(r, OP, ty)
    }

    /// Scatters the rows of `b` into `a` at the indices `c` (i64 or i32); the result is a view
    /// of `a`. `ggml_set_rows`.
    pub fn set_rows(&mut self, a: Tensor, b: Tensor, c: Tensor) -> Result<Tensor, GraphError> {
        const OP: &str = "ggml_set_rows";
        let f = self.op_fn(self.ops_table().ggml_set_rows, OP)?;
        let (sa, sb, sc) = (self.shape(a)?, self.shape(b)?, self.shape(c)?);
        let ok = sa[0] == sb[0]
            && sa[2] == sb[2]
            && sa[3] == sb[3]
            && sb[1] == sc[0]
            && sc[1] > 0
            && sc[2] > 0
            && sb[2] % sc[1] == 0
            && sb[3] % sc[2] == 0
            && sc[3] == 1;
        self.require(ok, OP, || {
            format!("a {sa:?}, b {sb:?}, indices {sc:?} do not fit")
        })?;
        self.require(
            matches!(self.ty_of(b), Some(Type::F32 | Type::F16) | None),
            OP,
            || "b must be f32 or f16".into(),
        )?;
        self.require(
            matches!(self.ty_of(c), Some(Type::I64 | Type::I32) | None),
            OP,
            || "indices must be i64 or i32".into(),
        )?;
        let (pa, pb, pc) = (self.ptr(a)?, self.ptr(b)?, self.ptr(c)?);
        let state = self.view_of(a, 0)?;
        let ty = self.ty_of(a);
        self.reserve()?;
        let args = [self.c_tensor(a), self.c_tensor(b), self.c_tensor(c)];
        self.note_call(OP, &args);
        // SAFETY: declared signature; ggml's shape asserts checked; room reserved.
        let r = unsafe { f(self.ctx(), pa, pb, pc) };
        self.push(r, OP, ty, None, state)
    }

    /// The indices of each row's `k` largest elements, in no particular order. `ggml_top_k`.
    pub fn top_k(&mut self, a: Tensor, k: i32) -> Result<Tensor, GraphError> {
        const OP: &str = "ggml_top_k";
        let f = self.op_fn(self.ops_table().ggml_top_k, OP)?;
        let s = self.shape(a)?;
        self.require(k >= 0 && i64::from(k) <= s[0], OP, || {
            format!("k = {k} for rows of {}", s[0])
        })?;
        let pa = self.ptr(a)?;
        self.reserve()?;
        self.note_call(OP, &[self.c_tensor(a), k.to_string()]);
        // SAFETY: declared signature; k within the row as ggml asserts; room reserved.
        let r = unsafe { f(self.ctx(), pa, k) };
        self.push_op(r, OP, Some(Type::I32))
    }

    /// Clamps to `[min, max]`. ggml makes the result a view of `a`: the op writes in place.
    /// `ggml_clamp`.
    pub fn clamp(&mut self, a: Tensor, min: f32, max: f32) -> Result<Tensor, GraphError> {
        const OP: &str = "ggml_clamp";
        let f = self.op_fn(self.ops_table().ggml_clamp, OP)?;
        let pa = self.ptr(a)?;
        let state = self.view_of(a, 0)?;
        let ty = self.ty_of(a);
        self.reserve()?;
        self.note_call(OP, &[self.c_tensor(a), c_f32(min), c_f32(max)]);
        // SAFETY: declared signature; room reserved.
        let r = unsafe { f(self.ctx(), pa, min, max) };
        self.push(r, OP, ty, None, state)
    }

    /// Transposed 1-D convolution. ggml accepts only `p0 == 0` and `d0 == 1` (it asserts both,
    /// though the signature takes them). `ggml_conv_transpose_1d`.
    pub fn conv_transpose_1d(
        &mut self,
        a: Tensor,
        b: Tensor,
        s0: i32,
        p0: i32,
        d0: i32,
    ) -> Result<Tensor, GraphError> {
        const OP: &str = "ggml_conv_transpose_1d";
        let f = self.op_fn(self.ops_table().ggml_conv_transpose_1d, OP)?;
        self.require(p0 == 0 && d0 == 1, OP, || {
            format!("p0 = {p0}, d0 = {d0}: ggml supports only 0 and 1")
        })?;
        let (sa, sb) = (self.shape(a)?, self.shape(b)?);
        self.require(
            sb[2] == 1 && sb[3] == 1 && sa[2] == sb[1] && sa[3] == 1,
            OP,
            || format!("kernel {sa:?} and data {sb:?} do not fit"),
        )?;
        let (pa, pb) = (self.ptr(a)?, self.ptr(b)?);
        self.reserve()?;
        let args = [
            self.c_tensor(a),
            self.c_tensor(b),
            s0.to_string(),
            p0.to_string(),
            d0.to_string(),
        ];
        self.note_call(OP, &args);
        // SAFETY: declared signature; ggml's asserts checked; room reserved.
        let r = unsafe { f(self.ctx(), pa, pb, s0, p0, d0) };
        self.push_op(r, OP, Some(Type::F32))
    }

    /// Rotary position embedding: `a` `[n_embd, n_head, n_tokens, ...]`, positions `b` (i32,
    /// `n_tokens`), optional frequency factors `c`. `ggml_rope_ext`.
    pub fn rope_ext(
        &mut self,
        a: Tensor,
        b: Tensor,
        c: Option<Tensor>,
        p: RopeParams,
    ) -> Result<Tensor, GraphError> {
        self.rope_with("ggml_rope_ext", self.ops_table().ggml_rope_ext, a, b, c, p)
    }

    /// The gradient of [`Graph::rope_ext`]: `a` is the gradient of its result, the rest as
    /// there. `ggml_rope_ext_back`.
    pub fn rope_ext_back(
        &mut self,
        a: Tensor,
        b: Tensor,
        c: Option<Tensor>,
        p: RopeParams,
    ) -> Result<Tensor, GraphError> {
        let f = self.ops_table().ggml_rope_ext_back;
        self.rope_with("ggml_rope_ext_back", f, a, b, c, p)
    }

    /// `ggml_rope_ext` and its gradient: one signature, the same asserts.
    #[allow(clippy::type_complexity)]
    fn rope_with(
        &mut self,
        op: &'static str,
        f: Option<
            unsafe extern "C" fn(
                *mut c_void,
                *mut c_void,
                *mut c_void,
                *mut c_void,
                c_int,
                c_int,
                c_int,
                f32,
                f32,
                f32,
                f32,
                f32,
                f32,
            ) -> *mut c_void,
        >,
        a: Tensor,
        b: Tensor,
        c: Option<Tensor>,
        p: RopeParams,
    ) -> Result<Tensor, GraphError> {
        let f = self.op_fn(f, op)?;
        let (sa, sb) = (self.shape(a)?, self.shape(b)?);
        self.require(p.mode & 1 == 0, op, || {
            "mode & 1 is no longer supported by ggml".into()
        })?;
        self.require(sb[1] == 1 && sb[2] == 1 && sb[3] == 1, op, || {
            "positions must be a vector".into()
        })?;
        self.require(matches!(self.ty_of(b), Some(Type::I32) | None), op, || {
            "positions must be i32".into()
        })?;
        let want = if p.mode & crate::types::rope_mode::MROPE != 0 {
            sa[2] * 4
        } else {
            sa[2]
        };
        self.require(sb[0] == want, op, || {
            format!("{} positions for {} tokens", sb[0], sa[2])
        })?;
        let (pa, pb, pc) = (self.ptr(a)?, self.ptr(b)?, Arg::c(c, self)?);
        let ty = self.ty_of(a);
        self.reserve()?;
        if self.is_recording() {
            let args = [
                self.c_tensor(a),
                self.c_tensor(b),
                Arg::text(c, self),
                p.n_dims.to_string(),
                p.mode.to_string(),
                p.n_ctx_orig.to_string(),
                c_f32(p.freq_base),
                c_f32(p.freq_scale),
                c_f32(p.ext_factor),
                c_f32(p.attn_factor),
                c_f32(p.beta_fast),
                c_f32(p.beta_slow),
            ];
            self.note_call(op, &args);
        }
        // SAFETY: declared signature; ggml's asserts checked; room reserved.
        let r = unsafe {
            f(
                self.ctx(),
                pa,
                pb,
                pc,
                p.n_dims,
                p.mode,
                p.n_ctx_orig,
                p.freq_base,
                p.freq_scale,
                p.ext_factor,
                p.attn_factor,
                p.beta_fast,
                p.beta_slow,
            )
        };
        self.push_op(r, op, ty)
    }

    /// An element-wise unary op, through its own entry point (`ggml_silu`, `ggml_gelu_erf`, ...).
    pub fn unary(&mut self, a: Tensor, op: UnaryOp) -> Result<Tensor, GraphError> {
        let o = self.ops_table();
        let (f, sym) = match op {
            UnaryOp::Abs => (o.ggml_abs, "ggml_abs"),
            UnaryOp::Sgn => (o.ggml_sgn, "ggml_sgn"),
            UnaryOp::Neg => (o.ggml_neg, "ggml_neg"),
            UnaryOp::Step => (o.ggml_step, "ggml_step"),
            UnaryOp::Tanh => (o.ggml_tanh, "ggml_tanh"),
            UnaryOp::Elu => (o.ggml_elu, "ggml_elu"),
            UnaryOp::Relu => (o.ggml_relu, "ggml_relu"),
            UnaryOp::Sigmoid => (o.ggml_sigmoid, "ggml_sigmoid"),
            UnaryOp::Gelu => (o.ggml_gelu, "ggml_gelu"),
            UnaryOp::GeluQuick => (o.ggml_gelu_quick, "ggml_gelu_quick"),
            UnaryOp::GeluErf => (o.ggml_gelu_erf, "ggml_gelu_erf"),
            UnaryOp::Silu => (o.ggml_silu, "ggml_silu"),
            UnaryOp::Hardswish => (o.ggml_hardswish, "ggml_hardswish"),
            UnaryOp::Hardsigmoid => (o.ggml_hardsigmoid, "ggml_hardsigmoid"),
            UnaryOp::Exp => (o.ggml_exp, "ggml_exp"),
            UnaryOp::Expm1 => (o.ggml_expm1, "ggml_expm1"),
            UnaryOp::Softplus => (o.ggml_softplus, "ggml_softplus"),
            UnaryOp::Floor => (o.ggml_floor, "ggml_floor"),
            UnaryOp::Ceil => (o.ggml_ceil, "ggml_ceil"),
            UnaryOp::Round => (o.ggml_round, "ggml_round"),
            UnaryOp::Trunc => (o.ggml_trunc, "ggml_trunc"),
        };
        let f = self.op_fn(f, sym)?;
        let pa = self.ptr(a)?;
        let ty = self.ty_of(a);
        self.reserve()?;
        self.note_call(sym, &[self.c_tensor(a)]);
        // SAFETY: declared signature; room reserved.
        let r = unsafe { f(self.ctx(), pa) };
        self.push_op(r, sym, ty)
    }

    /// A gated linear unit over one tensor: each row's second half gates its first (the other
    /// way round with `swapped`); the result has half the columns.
    pub fn glu(&mut self, a: Tensor, op: GluOp, swapped: bool) -> Result<Tensor, GraphError> {
        let o = self.ops_table();
        let (f, sym) = match (op, swapped) {
            (GluOp::Reglu, false) => (o.ggml_reglu, "ggml_reglu"),
            (GluOp::Reglu, true) => (o.ggml_reglu_swapped, "ggml_reglu_swapped"),
            (GluOp::Geglu, false) => (o.ggml_geglu, "ggml_geglu"),
            (GluOp::Geglu, true) => (o.ggml_geglu_swapped, "ggml_geglu_swapped"),
            (GluOp::Swiglu, false) => (o.ggml_swiglu, "ggml_swiglu"),
            (GluOp::Swiglu, true) => (o.ggml_swiglu_swapped, "ggml_swiglu_swapped"),
            (GluOp::GegluErf, false) => (o.ggml_geglu_erf, "ggml_geglu_erf"),
            (GluOp::GegluErf, true) => (o.ggml_geglu_erf_swapped, "ggml_geglu_erf_swapped"),
            (GluOp::GegluQuick, false) => (o.ggml_geglu_quick, "ggml_geglu_quick"),
            (GluOp::GegluQuick, true) => (o.ggml_geglu_quick_swapped, "ggml_geglu_quick_swapped"),
        };
        let f = self.op_fn(f, sym)?;
        let pa = self.ptr(a)?;
        let ty = self.ty_of(a);
        self.reserve()?;
        self.note_call(sym, &[self.c_tensor(a)]);
        // SAFETY: declared signature; room reserved.
        let r = unsafe { f(self.ctx(), pa) };
        self.push_op(r, sym, ty)
    }

    /// A gated linear unit with the gate in its own tensor `b` (same shape as `a`).
    pub fn glu_split(&mut self, a: Tensor, b: Tensor, op: GluOp) -> Result<Tensor, GraphError> {
        let o = self.ops_table();
        let (f, sym) = match op {
            GluOp::Reglu => (o.ggml_reglu_split, "ggml_reglu_split"),
            GluOp::Geglu => (o.ggml_geglu_split, "ggml_geglu_split"),
            GluOp::Swiglu => (o.ggml_swiglu_split, "ggml_swiglu_split"),
            GluOp::GegluErf => (o.ggml_geglu_erf_split, "ggml_geglu_erf_split"),
            GluOp::GegluQuick => (o.ggml_geglu_quick_split, "ggml_geglu_quick_split"),
        };
        let f = self.op_fn(f, sym)?;
        let (pa, pb) = (self.ptr(a)?, self.ptr(b)?);
        // SAFETY: live tensors.
        let same = unsafe { (self.api().ggml_are_same_shape)(pa, pb) };
        self.require(same, sym, || "a and b must have the same shape".into())?;
        let ty = self.ty_of(a);
        self.reserve()?;
        self.note_call(sym, &[self.c_tensor(a), self.c_tensor(b)]);
        // SAFETY: declared signature; room reserved.
        let r = unsafe { f(self.ctx(), pa, pb) };
        self.push_op(r, sym, ty)
    }

    /// SwiGLU over one tensor (`glu(a, Swiglu, false)`).
    pub fn swiglu(&mut self, a: Tensor) -> Result<Tensor, GraphError> {
        self.glu(a, GluOp::Swiglu, false)
    }

    /// GeGLU over one tensor (`glu(a, Geglu, false)`).
    pub fn geglu(&mut self, a: Tensor) -> Result<Tensor, GraphError> {
        self.glu(a, GluOp::Geglu, false)
    }

    /// Calls an entry point this crate does not wrap, with the graph's context, and records its
    /// result (of element type `ty`, if known).
    ///
    /// # Safety
    /// `build` must call a ggml op constructor of the loaded build correctly: with the context
    /// it is given and tensors from [`raw_tensor`](Graph::raw_tensor) of this graph, returning
    /// the new tensor. It may make at most three tensors.
    pub unsafe fn raw_op(
        &mut self,
        sym: &'static str,
        ty: Option<Type>,
        build: impl FnOnce(*mut c_void) -> *mut c_void,
    ) -> Result<Tensor, GraphError> {
        self.reserve()?;
        let r = build(self.ctx());
        self.push_op(r, sym, ty)
    }

    /// The `struct ggml_tensor *` behind a handle, for [`raw_op`](Graph::raw_op).
    pub fn raw_tensor(&self, t: Tensor) -> Result<*mut c_void, GraphError> {
        self.ptr(t)
    }
}
