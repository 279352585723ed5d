//! Call arguments as any JSON (or a JSON string holding JSON): normalising
//! never panics, and an accepted object's checksum is stable when the object
//! is written out and read back.
#![no_main]

use joch_core::checksum;
use joch_core::normalize::normalize_args;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(input) = serde_json::from_slice::<Value>(data) else {
        let text = String::from_utf8_lossy(data).into_owned();
        let _ = normalize_args(Value::String(text));
        return;
    };
    if let Ok(args) = normalize_args(input) {
        let first = checksum("tool", &args);
        let again = serde_json::to_string(&args)
            .ok()
            .and_then(|text| normalize_args(Value::String(text)).ok());
        if let Some(again) = again {
            assert_eq!(
                first,
                checksum("tool", &again),
                "checksum changed on a round trip"
            );
        }
    }
});
