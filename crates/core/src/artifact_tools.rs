//! The forged artifact tools (seed 001: `SpooledArtifact.forgeTools`):
//! `artifact_head`, `artifact_tail`, `artifact_grep`, `artifact_slice` and
//! `artifact_jq`, which read a handle's content without putting all of it
//! in front of the model.
//!
//! Pure functions over the content's bytes. Every answer is a plain value
//! bounded by [`MAX_RESULT_BYTES`] and [`MAX_LINES`], with `truncated: true`
//! when something was left out: an artifact tool never yields another
//! artifact, so they cannot be stacked.

use regex::RegexBuilder;
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// Largest answer of an artifact tool, in bytes of text.
pub const MAX_RESULT_BYTES: usize = 64 * 1024;
/// Most lines (or grep matches, or jq values) in one answer.
pub const MAX_LINES: usize = 1000;
/// Most context lines either side of a grep match.
pub const MAX_CONTEXT: usize = 10;

/// The names of the forged tools, as offered to models.
pub const NAMES: [&str; 5] = [
    "artifact_head",
    "artifact_tail",
    "artifact_grep",
    "artifact_slice",
    "artifact_jq",
];

/// True for the name of a forged artifact tool.
pub fn is_artifact_tool(name: &str) -> bool {
    NAMES.contains(&name)
}

/// Why an artifact tool could not answer: recorded as the call's error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactToolError {
    /// Stable snake_case cause.
    pub code: &'static str,
    /// For the model.
    pub message: String,
}

fn bad(code: &'static str, message: impl Into<String>) -> ArtifactToolError {
    ArtifactToolError {
        code,
        message: message.into(),
    }
}

/// The `callId` argument every forged tool takes: which call's handle to read.
pub fn call_id(args: &Map<String, Value>) -> Result<&str, ArtifactToolError> {
    args.get("callId").and_then(Value::as_str).ok_or_else(|| {
        bad(
            "invalid_arguments",
            "callId (the id of a call whose result is a handle) is required",
        )
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct LinesArgs {
    #[allow(dead_code)]
    call_id: String,
    #[serde(default = "twenty")]
    lines: usize,
}

fn twenty() -> usize {
    20
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct GrepArgs {
    #[allow(dead_code)]
    call_id: String,
    pattern: String,
    #[serde(default)]
    context: usize,
    #[serde(default)]
    ignore_case: bool,
    #[serde(default = "hundred")]
    max_matches: usize,
}

fn hundred() -> usize {
    100
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SliceArgs {
    #[allow(dead_code)]
    call_id: String,
    #[serde(default)]
    unit: Unit,
    start: u64,
    end: Option<u64>,
}

#[derive(Deserialize, Default, Clone, Copy)]
#[serde(rename_all = "snake_case")]
enum Unit {
    #[default]
    Lines,
    Bytes,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct JqArgs {
    #[allow(dead_code)]
    call_id: String,
    path: String,
}

fn parse<T: serde::de::DeserializeOwned>(
    tool: &str,
    args: &Map<String, Value>,
) -> Result<T, ArtifactToolError> {
    serde_json::from_value(Value::Object(args.clone()))
        .map_err(|e| bad("invalid_arguments", format!("{tool}: {e}")))
}

/// Runs forged tool `tool` with `args` over `content`.
pub fn run(
    tool: &str,
    args: &Map<String, Value>,
    content: &[u8],
) -> Result<Value, ArtifactToolError> {
    match tool {
        "artifact_head" => {
            let a: LinesArgs = parse(tool, args)?;
            let lines: Vec<&[u8]> = lines(content).take(a.lines.min(MAX_LINES)).collect();
            Ok(text_answer(&lines, 1, a.lines > MAX_LINES))
        }
        "artifact_tail" => {
            let a: LinesArgs = parse(tool, args)?;
            let all: Vec<&[u8]> = lines(content).collect();
            let n = a.lines.min(MAX_LINES).min(all.len());
            let first = all.len() - n;
            Ok(text_answer(&all[first..], first + 1, a.lines > MAX_LINES))
        }
        "artifact_grep" => grep(&parse(tool, args)?, content),
        "artifact_slice" => slice(&parse(tool, args)?, content),
        "artifact_jq" => jq(&parse::<JqArgs>(tool, args)?.path, content),
        other => Err(bad(
            "unknown_artifact_tool",
            format!("{other:?} is not an artifact tool"),
        )),
    }
}

/// The lines of `content`, without their `\n` (nor a `\r` before it); a
/// final newline does not start another line.
fn lines(content: &[u8]) -> impl Iterator<Item = &[u8]> {
    let body = content.strip_suffix(b"\n").unwrap_or(content);
    let empty = body.is_empty() && content.is_empty();
    body.split(|b| *b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .take(if empty { 0 } else { usize::MAX })
}

/// Accumulates text up to [`MAX_RESULT_BYTES`], noting whether any was left out.
#[derive(Default)]
struct Bounded {
    text: String,
    truncated: bool,
}

impl Bounded {
    /// Adds a line; false once the bound is reached.
    fn push_line(&mut self, line: &str) -> bool {
        if self.truncated {
            return false;
        }
        if self.text.len() + line.len() + 1 > MAX_RESULT_BYTES {
            let room = MAX_RESULT_BYTES.saturating_sub(self.text.len());
            let mut cut = room.min(line.len());
            while !line.is_char_boundary(cut) {
                cut -= 1;
            }
            self.text.push_str(&line[..cut]);
            self.truncated = true;
            return false;
        }
        self.text.push_str(line);
        self.text.push('\n');
        true
    }
}

fn text_answer(lines: &[&[u8]], first_line: usize, asked_too_many: bool) -> Value {
    let mut out = Bounded::default();
    let mut shown = 0;
    for line in lines {
        if !out.push_line(&String::from_utf8_lossy(line)) {
            break;
        }
        shown += 1;
    }
    json!({
        "text": out.text,
        "firstLine": first_line,
        "lines": shown,
        "truncated": out.truncated || asked_too_many,
    })
}

fn grep(a: &GrepArgs, content: &[u8]) -> Result<Value, ArtifactToolError> {
    let regex = RegexBuilder::new(&a.pattern)
        .case_insensitive(a.ignore_case)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| bad("invalid_regex", format!("pattern {:?}: {e}", a.pattern)))?;
    let context = a.context.min(MAX_CONTEXT);
    let max_matches = a.max_matches.clamp(1, MAX_LINES);
    let all: Vec<String> = lines(content)
        .map(|l| String::from_utf8_lossy(l).into_owned())
        .collect();
    let mut hits: Vec<usize> = Vec::new();
    let mut more = false;
    for (i, line) in all.iter().enumerate() {
        if regex.is_match(line) {
            if hits.len() == max_matches {
                more = true;
                break;
            }
            hits.push(i);
        }
    }
    // Context ranges around each hit, merged where they touch, so every
    // line is shown once and `--` separates the gaps (as grep does).
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    for &i in &hits {
        let (from, to) = (i.saturating_sub(context), (i + context).min(all.len() - 1));
        match ranges.last_mut() {
            Some(last) if from <= last.1 + 1 => last.1 = to,
            _ => ranges.push((from, to)),
        }
    }
    let mut out = Bounded::default();
    let mut next_hit = hits.iter().peekable();
    'ranges: for (k, &(from, to)) in ranges.iter().enumerate() {
        if k > 0 && !out.push_line("--") {
            break;
        }
        for (j, line) in all.iter().enumerate().take(to + 1).skip(from) {
            let hit = next_hit.next_if(|&&h| h == j).is_some();
            let mark = if hit { ':' } else { '-' };
            if !out.push_line(&format!("{}{mark}{line}", j + 1)) {
                break 'ranges;
            }
        }
    }
    let matches = hits.len();
    Ok(json!({
        "text": out.text,
        "matches": matches,
        "truncated": out.truncated || more,
    }))
}

fn slice(a: &SliceArgs, content: &[u8]) -> Result<Value, ArtifactToolError> {
    match a.unit {
        Unit::Bytes => {
            let size = content.len() as u64;
            if let Some(end) = a.end.filter(|end| a.start > *end) {
                return Err(bad(
                    "invalid_arguments",
                    format!("start {} is after end {end}", a.start),
                ));
            }
            // Past the end is an empty slice, not an error: sizes are in the handle.
            let start = a.start.min(size);
            let end = a.end.unwrap_or(size).min(size);
            let wanted = usize::try_from(end - start).unwrap_or(usize::MAX);
            let take = wanted.min(MAX_RESULT_BYTES);
            let from = usize::try_from(start).unwrap_or(usize::MAX);
            let bytes = &content[from..from + take];
            Ok(json!({
                "text": String::from_utf8_lossy(bytes),
                "start": start,
                "end": start + take as u64,
                "size": size,
                "truncated": take < wanted,
            }))
        }
        Unit::Lines => {
            if a.start == 0 {
                return Err(bad("invalid_arguments", "lines are numbered from 1"));
            }
            let end = a
                .end
                .unwrap_or(a.start.saturating_add(MAX_LINES as u64 - 1));
            if a.start > end {
                return Err(bad(
                    "invalid_arguments",
                    format!("start {} is after end {end}", a.start),
                ));
            }
            let wanted = (end - a.start + 1) as usize;
            let take = wanted.min(MAX_LINES);
            let picked: Vec<&[u8]> = lines(content)
                .skip((a.start - 1) as usize)
                .take(take)
                .collect();
            let asked_too_many = take < wanted && picked.len() == take;
            Ok(text_answer(&picked, a.start as usize, asked_too_many))
        }
    }
}

/// Selects `path` from the content as JSON: a JSON pointer (`/items/0/id`)
/// or a dotted path (`.items[0].id`, `items.0.id`; `.` or empty is the
/// whole document). Content that is not one JSON document is read as JSON
/// lines, and the path is applied to each line.
fn jq(path: &str, content: &[u8]) -> Result<Value, ArtifactToolError> {
    let pointer = to_pointer(path)?;
    if let Ok(doc) = serde_json::from_slice::<Value>(content) {
        let value = doc.pointer(&pointer).cloned().ok_or_else(|| {
            bad(
                "path_not_found",
                format!("{path:?} selects nothing in the document"),
            )
        })?;
        let text = value.to_string();
        if text.len() > MAX_RESULT_BYTES {
            let (shown, _) = crate::artifact::preview(text.as_bytes(), MAX_RESULT_BYTES);
            return Ok(json!({"json": Value::Null, "text": shown, "truncated": true}));
        }
        return Ok(json!({"json": value, "truncated": false}));
    }
    let mut values = Vec::new();
    let (mut size, mut truncated, mut parsed) = (0usize, false, 0usize);
    for line in lines(content).filter(|l| !l.iter().all(u8::is_ascii_whitespace)) {
        let Ok(doc) = serde_json::from_slice::<Value>(line) else {
            continue;
        };
        parsed += 1;
        let Some(value) = doc.pointer(&pointer) else {
            continue;
        };
        let len = value.to_string().len();
        if values.len() == MAX_LINES || size + len > MAX_RESULT_BYTES {
            truncated = true;
            break;
        }
        size += len;
        values.push(value.clone());
    }
    if parsed == 0 {
        return Err(bad(
            "not_json",
            "the artifact is neither a JSON document nor JSON lines",
        ));
    }
    Ok(json!({"json": values, "jsonLines": true, "truncated": truncated}))
}

/// A JSON pointer for `path` (see [`jq`]).
fn to_pointer(path: &str) -> Result<String, ArtifactToolError> {
    let path = path.trim();
    if path.starts_with('/') {
        return Ok(path.to_owned());
    }
    let mut pointer = String::new();
    let body = path.strip_prefix('.').unwrap_or(path);
    for segment in body.split('.').filter(|s| !s.is_empty()) {
        // `items[0][1]` is `items`, `0`, `1`.
        let (name, mut rest) = segment.split_at(segment.find('[').unwrap_or(segment.len()));
        if !name.is_empty() {
            pointer.push('/');
            pointer.push_str(&name.replace('~', "~0").replace('/', "~1"));
        }
        while let Some(open) = rest.strip_prefix('[') {
            let (index, after) = open
                .split_once(']')
                .ok_or_else(|| bad("invalid_arguments", format!("unclosed '[' in {path:?}")))?;
            pointer.push('/');
            pointer.push_str(index.trim_matches('"'));
            rest = after;
        }
        if !rest.is_empty() {
            return Err(bad(
                "invalid_arguments",
                format!("cannot read {rest:?} in {path:?}"),
            ));
        }
    }
    Ok(pointer)
}

/// MCP definitions of the forged tools, their `callId` an `enum` of
/// `call_ids` (the calls whose handles they may read).
pub fn definitions(call_ids: &[String]) -> Vec<Value> {
    let call_id = json!({
        "type": "string",
        "enum": call_ids,
        "description": "id of a call of this execution whose result is an artifact handle",
    });
    let schema = |props: Value, required: &[&str]| {
        let mut properties = Map::new();
        properties.insert("callId".to_owned(), call_id.clone());
        if let Value::Object(p) = props {
            properties.extend(p);
        }
        let mut req = vec!["callId"];
        req.extend_from_slice(required);
        json!({"type": "object", "properties": properties, "required": req, "additionalProperties": false})
    };
    let lines =
        json!({"lines": {"type": "integer", "minimum": 0, "maximum": MAX_LINES, "default": 20}});
    let read_only = json!({"readOnlyHint": true, "idempotentHint": true, "openWorldHint": false, "destructiveHint": false});
    let tool = |name: &str, description: &str, input: Value| json!({"name": name, "description": description, "inputSchema": input, "annotations": read_only});
    vec![
        tool(
            "artifact_head",
            "The first lines of a call's artifact.",
            schema(lines.clone(), &[]),
        ),
        tool(
            "artifact_tail",
            "The last lines of a call's artifact.",
            schema(lines, &[]),
        ),
        tool(
            "artifact_grep",
            "Lines of a call's artifact matching a regular expression (Rust regex syntax), numbered, with optional context lines.",
            schema(
                json!({
                    "pattern": {"type": "string"},
                    "context": {"type": "integer", "minimum": 0, "maximum": MAX_CONTEXT, "default": 0},
                    "ignoreCase": {"type": "boolean", "default": false},
                    "maxMatches": {"type": "integer", "minimum": 1, "maximum": MAX_LINES, "default": 100}
                }),
                &["pattern"],
            ),
        ),
        tool(
            "artifact_slice",
            "A range of a call's artifact: lines start..=end numbered from 1 (unit lines), or bytes start..end from offset 0 (unit bytes).",
            schema(
                json!({
                    "unit": {"type": "string", "enum": ["lines", "bytes"], "default": "lines"},
                    "start": {"type": "integer", "minimum": 0},
                    "end": {"type": "integer", "minimum": 0}
                }),
                &["start"],
            ),
        ),
        tool(
            "artifact_jq",
            "Selects from a call's JSON artifact by a JSON pointer (/items/0/id) or a dotted path (.items[0].id); JSON lines are selected line by line.",
            schema(json!({"path": {"type": "string"}}), &["path"]),
        ),
    ]
}

#[cfg(test)]
mod tests;
