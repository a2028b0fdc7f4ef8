//! PM sampling's own subscription to CUPTI's context callbacks (a context made, a context about to be
//! destroyed), until a subscriber the recorder shares replaces it: this file, its `mod` line and the
//! `subscribe_context_callbacks` of `crate::counters::pm_sampling` are what the swap touches.

use std::ffi::c_void;

use cudarc::cupti::sys as cs;

use super::{Api, CUPTI_SUCCESS, FnDeviceId};

/// What a context-callback subscriber is told, on the thread that makes or destroys the context. Neither may
/// unwind into CUPTI (a panic is caught and dropped).
pub(crate) trait ContextEvents: Sync + 'static {
    /// A context was made on device `device`.
    fn context_created(&self, device: u32);
    /// A context is about to be destroyed (`cudaDeviceReset`, `cuCtxDestroy`, the runtime's teardown): it still
    /// lives during this call.
    fn context_ending(&self);
}

/// A live subscription to CUPTI's context callbacks ([`Api::subscribe_context_callbacks`]).
pub(crate) struct ContextSubscription(cs::CUpti_SubscriberHandle);

// SAFETY: a subscriber handle is an opaque token CUPTI accepts from any thread.
unsafe impl Send for ContextSubscription {}

/// What a callback needs: the function naming a context's device, and whom to tell.
struct CallbackTarget<E: ContextEvents> {
    device_id: FnDeviceId,
    events: &'static E,
}

/// CUPTI's resource callback: a context created is passed on with its device; one about to be destroyed, as is.
/// Never unwinds into CUPTI.
unsafe extern "C" fn on_resource_callback<E: ContextEvents>(
    user: *mut c_void,
    domain: u32,
    cbid: u32,
    data: *const c_void,
) {
    use cs::CUpti_CallbackIdResource as R;
    if user.is_null() || domain != cs::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RESOURCE as u32 {
        return;
    }
    // SAFETY: `user` is the leaked 'static `CallbackTarget<E>` given at subscribe.
    let target = unsafe { &*(user as *const CallbackTarget<E>) };
    if cbid == R::CUPTI_CBID_RESOURCE_CONTEXT_CREATED as u32 {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if data.is_null() {
                return;
            }
            let mut device = 0u32;
            // SAFETY: for resource callbacks `data` is a CUpti_ResourceData whose context lives during the callback.
            let code = unsafe { (target.device_id)((*data.cast::<cs::CUpti_ResourceData>()).context, &mut device) };
            if code == CUPTI_SUCCESS {
                target.events.context_created(device);
            }
        }));
    } else if cbid == R::CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING as u32 {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| target.events.context_ending()));
    }
}

impl Api {
    /// `cuptiSubscribe`, then `cuptiEnableCallback` for a context's destruction and its creation (unsubscribed
    /// again if either fails): `events` hears of them until [`Api::unsubscribe`]. Fails where another subscriber
    /// holds CUPTI's callbacks.
    pub fn subscribe_context_callbacks<E: ContextEvents>(
        &self,
        events: &'static E,
    ) -> Result<ContextSubscription, String> {
        // Leaked, once per sampler: CUPTI may call back until unsubscribed.
        let target: &'static CallbackTarget<E> =
            Box::leak(Box::new(CallbackTarget { device_id: self.device_id, events }));
        let mut sub: cs::CUpti_SubscriberHandle = std::ptr::null_mut();
        let user = target as *const CallbackTarget<E> as *mut c_void;
        // SAFETY: a valid out-pointer; the callback never unwinds; `user` is 'static.
        let code = unsafe { (self.subscribe)(&mut sub, on_resource_callback::<E>, user) };
        self.check("cuptiSubscribe (another CUPTI subscriber?)", code)?;
        let domain = cs::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RESOURCE as u32;
        let enable = |cbid: cs::CUpti_CallbackIdResource| {
            // SAFETY: `sub` is the live subscriber just made.
            let code = unsafe { (self.enable_callback)(1, sub, domain, cbid as u32) };
            self.check("cuptiEnableCallback", code)
        };
        let enabled = enable(cs::CUpti_CallbackIdResource::CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING)
            .and_then(|()| enable(cs::CUpti_CallbackIdResource::CUPTI_CBID_RESOURCE_CONTEXT_CREATED));
        if let Err(e) = enabled {
            self.unsubscribe(ContextSubscription(sub));
            return Err(e);
        }
        Ok(ContextSubscription(sub))
    }

    /// `cuptiUnsubscribe` (its result ignored).
    pub fn unsubscribe(&self, subscription: ContextSubscription) {
        // SAFETY: a live subscriber, consumed: unsubscribed once.
        let _ = unsafe { (self.unsubscribe)(subscription.0) };
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[derive(Default)]
    struct Heard(Mutex<Vec<String>>);

    impl ContextEvents for Heard {
        fn context_created(&self, device: u32) {
            self.0.lock().unwrap().push(format!("created {device}"));
        }

        fn context_ending(&self) {
            self.0.lock().unwrap().push("ending".into());
        }
    }

    /// Stands in for `cuptiGetDeviceId`: every context is on device 7.
    unsafe extern "C" fn device_7(_: cudarc::driver::sys::CUcontext, device: *mut u32) -> u32 {
        // SAFETY: the callback passes a valid out-pointer.
        unsafe { *device = 7 };
        CUPTI_SUCCESS
    }

    /// A context made is passed on with its device, one about to be destroyed as is; other callbacks, other
    /// domains and a context without data are not.
    #[test]
    fn context_callbacks_reach_the_subscriber() {
        let heard: &'static Heard = Box::leak(Box::default());
        let target = CallbackTarget { device_id: device_7, events: heard };
        let user = &target as *const CallbackTarget<Heard> as *mut c_void;
        let resource = cs::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RESOURCE as u32;
        let created = cs::CUpti_CallbackIdResource::CUPTI_CBID_RESOURCE_CONTEXT_CREATED as u32;
        let ending = cs::CUpti_CallbackIdResource::CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING as u32;
        let other = cs::CUpti_CallbackIdResource::CUPTI_CBID_RESOURCE_STREAM_CREATED as u32;
        // SAFETY: all-zero is a valid CUpti_ResourceData (a null context, which `device_7` does not read).
        let data: cs::CUpti_ResourceData = unsafe { std::mem::zeroed() };
        let data = &data as *const cs::CUpti_ResourceData as *const c_void;
        // SAFETY: `user` is a live `CallbackTarget<Heard>`, `data` a live CUpti_ResourceData or null.
        unsafe {
            on_resource_callback::<Heard>(user, resource, created, data);
            on_resource_callback::<Heard>(user, resource, created, std::ptr::null());
            on_resource_callback::<Heard>(user, resource, other, data);
            on_resource_callback::<Heard>(user, resource + 1, ending, data);
            on_resource_callback::<Heard>(user, resource, ending, std::ptr::null());
        }
        assert_eq!(*heard.0.lock().unwrap(), ["created 7", "ending"]);
    }
}
