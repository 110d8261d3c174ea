//! The C surface of ggml that this crate calls, as tables of function pointers resolved from the
//! loaded libraries.
//!
//! Every signature here is transcribed from the pinned snapshot's headers (`include/ggml.h`,
//! `include/ggml-backend.h`). ggml's structs are opaque to this crate: a tensor, a context, a
//! graph, a backend, a buffer and a buffer type are all `*mut c_void`, and what the crate needs to
//! know about a tensor it asks ggml through functions (`ggml_nbytes`, `ggml_is_view`, ...), so a
//! build whose struct layout differs from the snapshot's still works.
//!
//! Two tables: [`Api`], the symbols every build since the backend registry has, resolved when the
//! build is loaded (a missing one fails the load, naming it); and [`Ops`], the op constructors,
//! each optional, so a build too old for one op still runs the others and names the missing one
//! when it is used.

use std::ffi::{c_char, c_int, c_void};

/// `struct ggml_init_params`, passed by value to `ggml_init`.
#[repr(C)]
pub(crate) struct InitParams {
    pub(crate) mem_size: usize,
    pub(crate) mem_buffer: *mut c_void,
    pub(crate) no_alloc: bool,
}

/// `ggml_to_float_t`: `n` elements of a row of blocks into floats.
pub(crate) type ToFloat = unsafe extern "C" fn(x: *const c_void, y: *mut f32, n: i64);

/// `struct ggml_type_traits` (ggml.h), read through the pointer `ggml_get_type_traits` returns.
/// Its first fields have been the same since the struct was made public; the loader checks
/// `blck_size` and `type_size` against `ggml_blck_size` and `ggml_type_size` before trusting
/// `to_float`.
#[repr(C)]
pub(crate) struct TypeTraits {
    pub(crate) type_name: *const c_char,
    pub(crate) blck_size: i64,
    pub(crate) blck_size_interleave: i64,
    pub(crate) type_size: usize,
    pub(crate) is_quantized: bool,
    pub(crate) to_float: Option<ToFloat>,
    pub(crate) from_float_ref: *const c_void,
}

/// `ggml_from_float_t`: `k` floats of a row into the type's blocks.
pub(crate) type FromFloat = unsafe extern "C" fn(x: *const f32, y: *mut c_void, k: i64);

/// `struct ggml_type_traits_cpu` (ggml-cpu.h), read through the pointer
/// `ggml_get_type_traits_cpu` returns: the CPU backend's own row writer for a type
/// (`from_float`, what its set_rows and copies write with), beside its dot product.
#[repr(C)]
pub(crate) struct TypeTraitsCpu {
    pub(crate) from_float: Option<FromFloat>,
    pub(crate) vec_dot: *const c_void,
    pub(crate) vec_dot_type: c_int,
    pub(crate) nrows: i64,
}

/// `ggml_get_type_traits_cpu` (ggml-cpu.h).
pub(crate) type GetTypeTraitsCpu = unsafe extern "C" fn(ty: c_int) -> *const TypeTraitsCpu;
/// `ggml_cpu_init` (ggml-cpu.h): the CPU backend's tables, once per process (idempotent).
pub(crate) type CpuInit = unsafe extern "C" fn();

/// `ggml_log_callback`.
pub(crate) type LogCallback =
    unsafe extern "C" fn(level: c_int, text: *const c_char, user: *mut c_void);
/// `ggml_abort_callback_t`.
pub(crate) type AbortCallback = unsafe extern "C" fn(message: *const c_char);
/// What `ggml_backend_reg_get_proc_address(reg, "ggml_backend_set_n_threads")` returns.
pub(crate) type SetNThreads = unsafe extern "C" fn(backend: *mut c_void, n_threads: c_int);

/// Which library a core symbol lives in: the name a [`LoadError::MissingSymbol`] reports.
///
/// [`LoadError::MissingSymbol`]: crate::LoadError::MissingSymbol
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Home {
    /// `libggml-base.so`: tensors, graphs, buffers, backends (ggml.c, ggml-backend.cpp).
    Base,
    /// `libggml.so`: the backend registry and module loader (ggml-backend-reg.cpp).
    Registry,
}

impl Home {
    /// The library's file name.
    pub(crate) fn file_name(self) -> &'static str {
        match self {
            Home::Base => "libggml-base.so",
            Home::Registry => "libggml.so",
        }
    }
}

macro_rules! core_api {
    ($( $home:ident $sym:ident : fn($($arg:ty),* $(,)?) $(-> $ret:ty)? ; )*) => {
        /// The core symbols, resolved at load.
        pub(crate) struct Api {
            $( pub(crate) $sym: unsafe extern "C" fn($($arg),*) $(-> $ret)?, )*
        }

        impl Api {
            /// Every core symbol with the library it is resolved from, in resolution order.
            pub(crate) const SYMBOLS: &'static [(&'static str, Home)] = &[
                $( (stringify!($sym), Home::$home), )*
            ];

            /// Resolves every symbol, or names the first one missing.
            ///
            /// # Safety
            /// `lookup` must return the address of a function with exactly the declared signature.
            pub(crate) unsafe fn resolve(
                lookup: &mut dyn FnMut(&'static str, Home) -> Option<*mut c_void>,
            ) -> Result<Self, (&'static str, Home)> {
                Ok(Self {
                    $( $sym: {
                        let p = lookup(stringify!($sym), Home::$home)
                            .ok_or((stringify!($sym), Home::$home))?;
                        // SAFETY: the caller guarantees the symbol has the declared signature;
                        // a non-null data pointer and a function pointer have the same size.
                        unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) $(-> $ret)?>(p) }
                    }, )*
                })
            }
        }
    };
}

type P = *mut c_void;
type CP = *const c_void;
type Str = *const c_char;

core_api! {
    // misc (ggml.h)
    Base ggml_log_set: fn(Option<LogCallback>, P);
    Base ggml_status_to_string: fn(c_int) -> Str;

    // types and tensors, asked instead of read from the struct
    Base ggml_type_size: fn(c_int) -> usize;
    Base ggml_blck_size: fn(c_int) -> i64;
    Base ggml_row_size: fn(c_int, i64) -> usize;
    Base ggml_type_name: fn(c_int) -> Str;
    Base ggml_nbytes: fn(CP) -> usize;
    Base ggml_nelements: fn(CP) -> i64;
    Base ggml_unravel_index: fn(CP, i64, *mut i64, *mut i64, *mut i64, *mut i64);
    Base ggml_is_view: fn(CP) -> bool;
    Base ggml_is_contiguous: fn(CP) -> bool;
    Base ggml_is_transposed: fn(CP) -> bool;
    Base ggml_can_repeat: fn(CP, CP) -> bool;
    Base ggml_are_same_shape: fn(CP, CP) -> bool;
    Base ggml_op_desc: fn(CP) -> Str;
    Base ggml_get_name: fn(CP) -> Str;
    Base ggml_get_data: fn(CP) -> P;
    Base ggml_set_name: fn(P, Str) -> P;
    Base ggml_set_output: fn(P);

    // quantization (ggml.h): blocks made from f32 rows, and each type's own dequantizer
    Base ggml_quantize_chunk: fn(c_int, *const f32, P, i64, i64, i64, *const f32) -> usize;
    Base ggml_quantize_requires_imatrix: fn(c_int) -> bool;
    Base ggml_get_type_traits: fn(c_int) -> *const TypeTraits;

    // contexts and graphs
    Base ggml_tensor_overhead: fn() -> usize;
    Base ggml_graph_overhead_custom: fn(usize, bool) -> usize;
    Base ggml_init: fn(InitParams) -> P;
    Base ggml_free: fn(P);
    Base ggml_used_mem: fn(CP) -> usize;
    Base ggml_get_mem_size: fn(CP) -> usize;
    Base ggml_get_first_tensor: fn(CP) -> P;
    Base ggml_get_next_tensor: fn(CP, P) -> P;
    Base ggml_new_graph_custom: fn(P, usize, bool) -> P;
    Base ggml_build_forward_expand: fn(P, P);
    Base ggml_graph_n_nodes: fn(P) -> c_int;
    Base ggml_graph_node: fn(P, c_int) -> P;

    // tensor creation and views: the plumbing every graph needs
    Base ggml_new_tensor_1d: fn(P, c_int, i64) -> P;
    Base ggml_new_tensor_2d: fn(P, c_int, i64, i64) -> P;
    Base ggml_new_tensor_3d: fn(P, c_int, i64, i64, i64) -> P;
    Base ggml_new_tensor_4d: fn(P, c_int, i64, i64, i64, i64) -> P;
    Base ggml_view_1d: fn(P, P, i64, usize) -> P;
    Base ggml_view_2d: fn(P, P, i64, i64, usize, usize) -> P;
    Base ggml_view_3d: fn(P, P, i64, i64, i64, usize, usize, usize) -> P;
    Base ggml_view_4d: fn(P, P, i64, i64, i64, i64, usize, usize, usize, usize) -> P;
    Base ggml_reshape_4d: fn(P, P, i64, i64, i64, i64) -> P;
    Base ggml_permute: fn(P, P, c_int, c_int, c_int, c_int) -> P;
    Base ggml_transpose: fn(P, P) -> P;
    Base ggml_cont: fn(P, P) -> P;
    Base ggml_cpy: fn(P, P, P) -> P;

    // backend devices, backends, buffer types, buffers (ggml-backend.h)
    Base ggml_backend_dev_name: fn(P) -> Str;
    Base ggml_backend_dev_description: fn(P) -> Str;
    Base ggml_backend_dev_type: fn(P) -> c_int;
    Base ggml_backend_dev_memory: fn(P, *mut usize, *mut usize);
    Base ggml_backend_dev_init: fn(P, Str) -> P;
    Base ggml_backend_dev_supports_op: fn(P, CP) -> bool;
    Base ggml_backend_dev_backend_reg: fn(P) -> P;
    Base ggml_backend_reg_name: fn(P) -> Str;
    Base ggml_backend_reg_get_proc_address: fn(P, Str) -> P;
    Base ggml_backend_free: fn(P);
    Base ggml_backend_name: fn(P) -> Str;
    Base ggml_backend_get_default_buffer_type: fn(P) -> P;
    Base ggml_backend_graph_compute: fn(P, P) -> c_int;
    Base ggml_backend_synchronize: fn(P);
    Base ggml_backend_buft_name: fn(P) -> Str;
    Base ggml_backend_buft_alloc_buffer: fn(P, usize) -> P;
    Base ggml_backend_buft_get_alloc_size: fn(P, CP) -> usize;
    Base ggml_backend_buft_get_alignment: fn(P) -> usize;
    Base ggml_backend_buft_is_host: fn(P) -> bool;
    Base ggml_backend_buffer_free: fn(P);
    Base ggml_backend_buffer_get_base: fn(P) -> P;
    Base ggml_backend_buffer_get_size: fn(P) -> usize;
    Base ggml_backend_tensor_alloc: fn(P, P, P) -> c_int;
    Base ggml_backend_view_init: fn(P) -> c_int;
    Base ggml_backend_tensor_set: fn(P, CP, usize, usize);
    Base ggml_backend_tensor_get: fn(CP, P, usize, usize);
    Base ggml_backend_cpu_buffer_from_ptr: fn(P, usize) -> P;
    Base ggml_backend_cpu_buffer_type: fn() -> P;

    // the registry (ggml-backend-reg.cpp, in libggml.so)
    Registry ggml_backend_reg_count: fn() -> usize;
    Registry ggml_backend_reg_get: fn(usize) -> P;
    Registry ggml_backend_dev_count: fn() -> usize;
    Registry ggml_backend_dev_get: fn(usize) -> P;
    Registry ggml_backend_dev_by_name: fn(Str) -> P;
    Registry ggml_backend_load: fn(Str) -> P;
    Registry ggml_backend_load_all_from_path: fn(Str);
}

macro_rules! op_table {
    ($( $sym:ident : fn($($arg:ty),* $(,)?) $(-> $ret:ty)? ; )*) => {
        /// The op constructors and op modifiers, each resolved if the build has it.
        pub(crate) struct Ops {
            $( pub(crate) $sym: Option<unsafe extern "C" fn($($arg),*) $(-> $ret)?>, )*
        }

        impl Ops {
            /// Resolves what the build has; absent symbols stay `None`.
            ///
            /// # Safety
            /// `lookup` must return the address of a function with exactly the declared signature.
            pub(crate) unsafe fn resolve(lookup: &mut dyn FnMut(&'static str) -> Option<*mut c_void>) -> Self {
                Self {
                    $( $sym: lookup(stringify!($sym)).map(|p| {
                        // SAFETY: as for `Api::resolve`.
                        unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) $(-> $ret)?>(p) }
                    }), )*
                }
            }

            /// The names of the op symbols this build lacks.
            pub(crate) fn missing(&self) -> Vec<&'static str> {
                let mut v = Vec::new();
                $( if self.$sym.is_none() { v.push(stringify!($sym)); } )*
                v
            }
        }
    };
}

// Signatures as ggml.h in the pinned snapshot declares them. `int` enum parameters
// (ggml_type, ggml_tri_type, ggml_sort_order, ggml_op_pool, ggml_scale_mode, ggml_prec) are
// c_int; their values are fixed in the header (explicit or never reordered). The unary and GLU
// ops are called through their named entry points rather than ggml_unary/ggml_glu with an enum
// value, because those enums are not append-only across ggml versions.
op_table! {
    // Not ops, but younger than the rest of the core (2025): a build without them still loads.
    ggml_version: fn() -> Str;
    ggml_commit: fn() -> Str;
    ggml_set_abort_callback: fn(Option<AbortCallback>) -> Option<AbortCallback>;

    ggml_dup: fn(P, P) -> P;
    ggml_add: fn(P, P, P) -> P;
    ggml_sub: fn(P, P, P) -> P;
    ggml_mul: fn(P, P, P) -> P;
    ggml_div: fn(P, P, P) -> P;
    ggml_add_id: fn(P, P, P, P) -> P;
    ggml_acc: fn(P, P, P, usize, usize, usize, usize) -> P;
    ggml_sqr: fn(P, P) -> P;
    ggml_sqrt: fn(P, P) -> P;
    ggml_log: fn(P, P) -> P;
    ggml_sin: fn(P, P) -> P;
    ggml_cos: fn(P, P) -> P;
    ggml_sum: fn(P, P) -> P;
    ggml_sum_rows: fn(P, P) -> P;
    ggml_cumsum: fn(P, P) -> P;
    ggml_mean: fn(P, P) -> P;
    ggml_argmax: fn(P, P) -> P;
    ggml_count_equal: fn(P, P, P) -> P;
    ggml_repeat: fn(P, P, P) -> P;
    ggml_repeat_4d: fn(P, P, i64, i64, i64, i64) -> P;
    ggml_repeat_back: fn(P, P, P) -> P;
    ggml_concat: fn(P, P, P, c_int) -> P;
    ggml_cast: fn(P, P, c_int) -> P;

    // unary, by name
    ggml_abs: fn(P, P) -> P;
    ggml_sgn: fn(P, P) -> P;
    ggml_neg: fn(P, P) -> P;
    ggml_step: fn(P, P) -> P;
    ggml_tanh: fn(P, P) -> P;
    ggml_elu: fn(P, P) -> P;
    ggml_relu: fn(P, P) -> P;
    ggml_sigmoid: fn(P, P) -> P;
    ggml_gelu: fn(P, P) -> P;
    ggml_gelu_quick: fn(P, P) -> P;
    ggml_gelu_erf: fn(P, P) -> P;
    ggml_silu: fn(P, P) -> P;
    ggml_hardswish: fn(P, P) -> P;
    ggml_hardsigmoid: fn(P, P) -> P;
    ggml_exp: fn(P, P) -> P;
    ggml_expm1: fn(P, P) -> P;
    ggml_softplus: fn(P, P) -> P;
    ggml_floor: fn(P, P) -> P;
    ggml_ceil: fn(P, P) -> P;
    ggml_round: fn(P, P) -> P;
    ggml_trunc: fn(P, P) -> P;
    ggml_leaky_relu: fn(P, P, f32, bool) -> P;
    ggml_clamp: fn(P, P, f32, f32) -> P;

    // gated linear units, by name
    ggml_reglu: fn(P, P) -> P;
    ggml_reglu_swapped: fn(P, P) -> P;
    ggml_geglu: fn(P, P) -> P;
    ggml_geglu_swapped: fn(P, P) -> P;
    ggml_swiglu: fn(P, P) -> P;
    ggml_swiglu_swapped: fn(P, P) -> P;
    ggml_geglu_erf: fn(P, P) -> P;
    ggml_geglu_erf_swapped: fn(P, P) -> P;
    ggml_geglu_quick: fn(P, P) -> P;
    ggml_geglu_quick_swapped: fn(P, P) -> P;
    ggml_reglu_split: fn(P, P, P) -> P;
    ggml_geglu_split: fn(P, P, P) -> P;
    ggml_swiglu_split: fn(P, P, P) -> P;
    ggml_geglu_erf_split: fn(P, P, P) -> P;
    ggml_geglu_quick_split: fn(P, P, P) -> P;
    ggml_swiglu_oai: fn(P, P, P, f32, f32) -> P;

    // normalization
    ggml_norm: fn(P, P, f32) -> P;
    ggml_rms_norm: fn(P, P, f32) -> P;
    ggml_l2_norm: fn(P, P, f32) -> P;
    ggml_group_norm: fn(P, P, c_int, f32) -> P;

    // matrix products
    ggml_mul_mat: fn(P, P, P) -> P;
    ggml_mul_mat_set_prec: fn(P, c_int);
    ggml_mul_mat_set_hint: fn(P, c_int);
    ggml_mul_mat_id: fn(P, P, P, P) -> P;
    ggml_out_prod: fn(P, P, P) -> P;

    ggml_scale: fn(P, P, f32) -> P;
    ggml_scale_bias: fn(P, P, f32, f32) -> P;
    ggml_get_rows: fn(P, P, P) -> P;
    ggml_set_rows: fn(P, P, P, P) -> P;
    ggml_diag_mask_inf: fn(P, P, c_int) -> P;
    ggml_soft_max_ext: fn(P, P, P, f32, f32) -> P;
    ggml_soft_max_add_sinks: fn(P, P);
    ggml_soft_max_ext_back: fn(P, P, P, f32, f32) -> P;
    ggml_rope_ext: fn(P, P, P, P, c_int, c_int, c_int, f32, f32, f32, f32, f32, f32) -> P;
    ggml_rope_ext_back: fn(P, P, P, P, c_int, c_int, c_int, f32, f32, f32, f32, f32, f32) -> P;
    ggml_im2col: fn(P, P, P, c_int, c_int, c_int, c_int, c_int, c_int, bool, c_int) -> P;
    ggml_conv_transpose_1d: fn(P, P, P, c_int, c_int, c_int) -> P;
    ggml_pool_2d: fn(P, P, c_int, c_int, c_int, c_int, c_int, f32, f32) -> P;
    ggml_pool_1d: fn(P, P, c_int, c_int, c_int, c_int) -> P;
    ggml_upscale: fn(P, P, c_int, c_int) -> P;
    ggml_interpolate: fn(P, P, i64, i64, i64, i64, u32) -> P;
    ggml_pad: fn(P, P, c_int, c_int, c_int, c_int) -> P;
    ggml_pad_ext: fn(P, P, c_int, c_int, c_int, c_int, c_int, c_int, c_int, c_int) -> P;
    ggml_tri: fn(P, P, c_int) -> P;
    ggml_fill: fn(P, P, f32) -> P;
    ggml_timestep_embedding: fn(P, P, c_int, c_int) -> P;
    ggml_argsort: fn(P, P, c_int) -> P;
    ggml_top_k: fn(P, P, c_int) -> P;
    ggml_flash_attn_ext: fn(P, P, P, P, P, f32, f32, f32) -> P;
    ggml_flash_attn_ext_set_prec: fn(P, c_int);
    ggml_flash_attn_ext_add_sinks: fn(P, P);
    ggml_ssm_conv: fn(P, P, P) -> P;
    ggml_ssm_scan: fn(P, P, P, P, P, P, P, P, i64) -> P;
    ggml_rwkv_wkv6: fn(P, P, P, P, P, P, P) -> P;
    ggml_gated_linear_attn: fn(P, P, P, P, P, P, f32) -> P;
    ggml_rwkv_wkv7: fn(P, P, P, P, P, P, P, P) -> P;
    ggml_gated_delta_net: fn(P, P, P, P, P, P, P, i64) -> P;

    // gradients, fills, solvers
    ggml_silu_back: fn(P, P, P) -> P;
    ggml_rms_norm_back: fn(P, P, P, f32) -> P;
    ggml_xielu: fn(P, P, f32, f32, f32, f32) -> P;
    ggml_diag: fn(P, P) -> P;
    ggml_set: fn(P, P, P, usize, usize, usize, usize) -> P;
    ggml_set_inplace: fn(P, P, P, usize, usize, usize, usize) -> P;
    ggml_pad_reflect_1d: fn(P, P, c_int, c_int) -> P;
    ggml_solve_tri: fn(P, P, P, bool, bool, bool) -> P;
    ggml_get_rows_back: fn(P, P, P, P) -> P;
    ggml_arange: fn(P, f32, f32, f32) -> P;
    ggml_lightning_indexer: fn(P, P, P, P, P) -> P;

    // training
    ggml_set_param: fn(P);
    ggml_cross_entropy_loss: fn(P, P, P) -> P;
    ggml_cross_entropy_loss_back: fn(P, P, P, P) -> P;
    ggml_opt_step_adamw: fn(P, P, P, P, P, P) -> P;
    ggml_opt_step_sgd: fn(P, P, P, P) -> P;

    // convolutions
    ggml_conv_2d_dw_direct: fn(P, P, P, c_int, c_int, c_int, c_int, c_int, c_int) -> P;
    ggml_conv_2d_direct: fn(P, P, P, c_int, c_int, c_int, c_int, c_int, c_int) -> P;
    ggml_conv_3d_direct: fn(P, P, P, c_int, c_int, c_int, c_int, c_int, c_int, c_int, c_int, c_int, c_int, c_int, c_int) -> P;
    ggml_im2col_3d: fn(P, P, P, i64, c_int, c_int, c_int, c_int, c_int, c_int, c_int, c_int, c_int, c_int) -> P;
    ggml_col2im_1d: fn(P, P, c_int, c_int, c_int) -> P;
}

/// Converts a C string from ggml into an owned `String` (lossy; `""` for null).
///
/// # Safety
/// `p` must be null or point to a NUL-terminated string that stays valid for the call.
pub(crate) unsafe fn string(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: non-null and NUL-terminated per the caller.
    unsafe { std::ffi::CStr::from_ptr(p) }
        .to_string_lossy()
        .into_owned()
}
