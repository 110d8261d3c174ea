//! A backend: one device's stream, through which graphs run.

use std::ffi::{c_int, c_void, CString};
use std::ptr::NonNull;

use crate::error::BackendError;
use crate::ffi::{self, SetNThreads};
use crate::hooks;
use crate::types::DeviceKind;
use crate::Ggml;

/// A started backend (`ggml_backend_t`) with its device and default buffer type. Freed on drop.
///
/// Not `Sync`: a ggml backend is a stream, used by one thread at a time.
pub struct Backend {
    pub(crate) ggml: Ggml,
    pub(crate) ptr: NonNull<c_void>,
    pub(crate) dev: NonNull<c_void>,
    pub(crate) buft: NonNull<c_void>,
    name: String,
    device: String,
    kind: DeviceKind,
}

// SAFETY: a ggml backend may be used from any thread, one at a time; `Backend` is not `Sync`,
// and nothing in it is thread-local.
unsafe impl Send for Backend {}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backend")
            .field("name", &self.name)
            .field("device", &self.device)
            .field("kind", &self.kind)
            .finish()
    }
}

impl Backend {
    pub(crate) fn init(ggml: Ggml, dev: *mut c_void) -> Result<Backend, BackendError> {
        let api = ggml.api();
        // SAFETY: `dev` came from the registry and lives for the process; its name is owned by it.
        let device = unsafe { ffi::string((api.ggml_backend_dev_name)(dev)) };
        let dev = NonNull::new(dev).ok_or_else(|| BackendError::InitFailed {
            name: device.clone(),
            log: vec![],
        })?;
        let mark = hooks::mark();
        // SAFETY: a registry device; null params ask for the defaults.
        let ptr = unsafe { (api.ggml_backend_dev_init)(dev.as_ptr(), std::ptr::null()) };
        let ptr = NonNull::new(ptr).ok_or_else(|| BackendError::InitFailed {
            name: device.clone(),
            log: hooks::since(mark),
        })?;
        // SAFETY: a live backend.
        let buft = unsafe { (api.ggml_backend_get_default_buffer_type)(ptr.as_ptr()) };
        let Some(buft) = NonNull::new(buft) else {
            // SAFETY: freeing the backend just created, once.
            unsafe { (api.ggml_backend_free)(ptr.as_ptr()) };
            return Err(BackendError::InitFailed {
                name: device,
                log: vec!["backend has no buffer type".into()],
            });
        };
        // SAFETY: live backend and device; strings owned by them.
        let (name, kind) = unsafe {
            (
                ffi::string((api.ggml_backend_name)(ptr.as_ptr())),
                DeviceKind::from_raw((api.ggml_backend_dev_type)(dev.as_ptr())),
            )
        };
        Ok(Backend {
            ggml,
            ptr,
            dev,
            buft,
            name,
            device,
            kind,
        })
    }

    /// The backend's name ("CPU", "CUDA0").
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The device's registry name.
    pub fn device(&self) -> &str {
        &self.device
    }

    /// What kind of device it runs on (`ggml_backend_dev_type`).
    pub fn kind(&self) -> DeviceKind {
        self.kind
    }

    /// The default buffer type's name ("CPU", "CUDA0").
    pub(crate) fn buffer_type(&self) -> String {
        // SAFETY: a live buffer type; the name is owned by it.
        unsafe { ffi::string((self.ggml.api().ggml_backend_buft_name)(self.buft.as_ptr())) }
    }

    /// Whether the default buffer type is host memory (a CPU backend), which is what
    /// [`Placement::Host`](crate::Placement) and the guard placements need.
    pub fn is_host(&self) -> bool {
        // SAFETY: a live buffer type.
        unsafe { (self.ggml.api().ggml_backend_buft_is_host)(self.buft.as_ptr()) }
    }

    /// The default buffer type's alignment.
    pub fn alignment(&self) -> usize {
        // SAFETY: a live buffer type.
        unsafe { (self.ggml.api().ggml_backend_buft_get_alignment)(self.buft.as_ptr()) }
    }

    /// Sets the number of threads, where the backend has that setting (the CPU backend does,
    /// through its registry's `ggml_backend_set_n_threads`). Returns whether it did.
    pub fn set_n_threads(&self, n: usize) -> bool {
        let api = self.ggml.api();
        let Ok(n) = c_int::try_from(n.max(1)) else {
            return false;
        };
        // SAFETY: a live device; the registry and the proc-address string are static.
        let f = unsafe {
            let reg = (api.ggml_backend_dev_backend_reg)(self.dev.as_ptr());
            if reg.is_null() {
                return false;
            }
            (api.ggml_backend_reg_get_proc_address)(reg, c"ggml_backend_set_n_threads".as_ptr())
        };
        if f.is_null() {
            return false;
        }
        // SAFETY: ggml-backend.h declares this proc address as ggml_backend_set_n_threads_t.
        let f: SetNThreads = unsafe { std::mem::transmute::<*mut c_void, SetNThreads>(f) };
        // SAFETY: a live backend of that registry.
        unsafe { f(self.ptr.as_ptr(), n) };
        true
    }

    /// The device's free and total memory in bytes (`ggml_backend_dev_memory`; on CUDA this
    /// starts a context on the device).
    pub fn memory(&self) -> (usize, usize) {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: a live device; two valid out-pointers.
        unsafe {
            (self.ggml.api().ggml_backend_dev_memory)(self.dev.as_ptr(), &mut free, &mut total)
        };
        (free, total)
    }

    /// Waits for queued work.
    pub fn synchronize(&self) {
        // SAFETY: a live backend.
        unsafe { (self.ggml.api().ggml_backend_synchronize)(self.ptr.as_ptr()) }
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        // SAFETY: the backend was created by `ggml_backend_dev_init` and is freed once.
        unsafe { (self.ggml.api().ggml_backend_free)(self.ptr.as_ptr()) }
    }
}

/// Backends started from a loaded build. Here, beside the backend, so loading a build knows
/// nothing of what is started from it.
impl Ggml {
    /// Starts a backend on the device named `name` ("CPU", "CUDA0"; ggml compares names
    /// without regard to case).
    pub fn backend(&self, name: &str) -> Result<Backend, BackendError> {
        let c = CString::new(name).map_err(|_| BackendError::BadName(name.to_string()))?;
        // SAFETY: a NUL-terminated name that outlives the call.
        let dev = unsafe { (self.api().ggml_backend_dev_by_name)(c.as_ptr()) };
        if dev.is_null() {
            return Err(BackendError::Unknown {
                name: name.to_string(),
                available: self.devices().into_iter().map(|d| d.name).collect(),
                problems: self.inner.module_problems.clone(),
            });
        }
        Backend::init(*self, dev)
    }
}
