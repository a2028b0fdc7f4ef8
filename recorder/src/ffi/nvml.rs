//! NVML's raw field-value call, which nvml-wrapper's `field_values_for` cannot make with a scope (it leaves the
//! scope at 0: NVLink link 0 alone). The rest of NVML is used through nvml-wrapper's safe API.

use nvml_wrapper::Device;
use nvml_wrapper_sys::bindings as b;

/// Two unsigned field counters of device `d` over `scope` (`u32::MAX`: every NVLink link); `None` for a field
/// NVML failed or gave as another type.
pub fn field_counts(d: &Device<'_>, ids: [u32; 2], scope: u32) -> [Option<u64>; 2] {
    let Ok(get) = d.nvml().lib().nvmlDeviceGetFieldValues.as_ref() else { return [None; 2] };
    // SAFETY: nvmlFieldValue_t is plain C data: all-zero is valid.
    let mut values: [b::nvmlFieldValue_t; 2] = unsafe { std::mem::zeroed() };
    for (v, id) in values.iter_mut().zip(ids) {
        v.fieldId = id;
        v.scopeId = scope;
    }
    // SAFETY: a live device handle of this NVML; two field values to fill.
    if unsafe { get(d.handle(), values.len() as i32, values.as_mut_ptr()) } != b::nvmlReturn_enum_NVML_SUCCESS {
        return [None; 2];
    }
    values.map(|v| field_count(&v))
}

/// A field value's unsigned count, `None` when NVML failed it or gave another type.
fn field_count(v: &b::nvmlFieldValue_t) -> Option<u64> {
    if v.nvmlReturn != b::nvmlReturn_enum_NVML_SUCCESS {
        return None;
    }
    // SAFETY: the union member `valueType` names.
    unsafe {
        match v.valueType {
            b::nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_LONG_LONG => Some(v.value.ullVal),
            b::nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_LONG => Some(v.value.ulVal),
            b::nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_INT => Some(u64::from(v.value.uiVal)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NVLink's counts come as whatever unsigned type NVML says (KiB), and a field NVML failed gives none.
    #[test]
    fn field_values_are_read_by_their_type() {
        // SAFETY: plain C data.
        let mut v: b::nvmlFieldValue_t = unsafe { std::mem::zeroed() };
        v.valueType = b::nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
        v.value.ullVal = 5 << 40;
        assert_eq!(field_count(&v), Some(5 << 40));
        v.valueType = b::nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_INT;
        v.value = b::nvmlValue_t { uiVal: 7 };
        assert_eq!(field_count(&v), Some(7));
        v.valueType = b::nvmlValueType_enum_NVML_VALUE_TYPE_DOUBLE;
        assert_eq!(field_count(&v), None, "not a count");
        v.valueType = b::nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
        v.nvmlReturn = b::nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
        assert_eq!(field_count(&v), None, "a GPU without NVLink");
    }
}
