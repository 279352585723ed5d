//! Any bytes as a manifest body (JSON, else YAML), read as every kind the API
//! accepts, the way the server reads one: upgrade, deserialize, validate.
//! Nothing may panic, whatever is accepted or refused.
#![no_main]

use joch_core::{
    Budget, Endpoint, Execution, McpServer, Namespace, Object, Policy, Tool, ToolCall,
};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn read<T: Object>(manifest: &Value) {
    if let Ok(object) = serde_json::from_value::<T>(T::upgrade(manifest.clone())) {
        let _ = object.validate();
        // What was accepted must encode again.
        let _ = serde_json::to_vec(&object);
    }
}

fuzz_target!(|data: &[u8]| {
    let manifest = match serde_json::from_slice::<Value>(data) {
        Ok(value) => value,
        Err(_) => match serde_yaml_ng::from_slice::<Value>(data) {
            Ok(value) => value,
            Err(_) => return,
        },
    };
    read::<Tool>(&manifest);
    read::<Policy>(&manifest);
    read::<ToolCall>(&manifest);
    read::<Endpoint>(&manifest);
    read::<Execution>(&manifest);
    read::<McpServer>(&manifest);
    read::<Budget>(&manifest);
    read::<Namespace>(&manifest);
});
