//! Nonce-keyed output envelopes (seed 001) on the call path: which calls
//! get one, and the nonce.

use joch_core::envelope::{Envelope, OutputEnvelope, Trust};
use joch_core::{Tool, ToolCall};
use serde_json::Value;

use crate::EngineError;
use crate::policies::Policies;

impl Policies {
    /// The model-facing `output` of `call`, enveloped when its tool is
    /// untrusted and `outputEnvelope: nonce` (the tool's, else the
    /// namespace's); the nonce is recorded on the call.
    ///
    /// The nonce is a UUID v4 (122 bits from the operating system's CSPRNG,
    /// through `getrandom`), drawn after the tool answered: the tool cannot
    /// have seen it, and guessing it is hopeless.
    pub(crate) async fn envelop(
        &self,
        call: &mut ToolCall,
        tool: &Tool,
        output: Value,
    ) -> Result<Value, EngineError> {
        if tool.trust() == Trust::Trusted {
            return Ok(output);
        }
        let mode = match tool.spec.output_envelope {
            Some(mode) => mode,
            None => self
                .catalog
                .namespace(&call.metadata.namespace)
                .await?
                .spec
                .output_envelope
                .unwrap_or_default(),
        };
        if mode == OutputEnvelope::None {
            return Ok(output);
        }
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        let wrapped = rewrap(call, &nonce, output);
        call.status.output_nonce = Some(nonce);
        Ok(wrapped)
    }
}

/// `output` in the envelope of `call` keyed by `nonce`.
pub(crate) fn rewrap(call: &ToolCall, nonce: &str, output: Value) -> Value {
    Envelope {
        nonce,
        call_id: &call.metadata.name,
        checksum: &call.status.checksum,
    }
    .wrap(output)
}
