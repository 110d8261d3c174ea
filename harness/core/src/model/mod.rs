//! What a case is: its op and impl names, element type, shape in ggml order, parameters, seed
//! and allocation mode; the host tensors it is filled with; the device limits it is planned
//! against; and the words its verdict is made of; where kedge keeps its caches. Nothing here
//! touches a device.

pub mod cache;
pub mod case;
pub mod digest;
pub(crate) mod dtype;
pub mod host;
pub mod limits;
pub(crate) mod ne;
pub mod params;
pub mod rng;
pub mod shape;
pub(crate) mod words;
