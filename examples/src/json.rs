//! A small JSON reader and writer, enough for iperf3's control messages, the HTTP example's
//! `/stats` and the tests that read `iperf3 --json`.
//!
//! The parser takes untrusted input: it never panics, nests at most [`MAX_DEPTH`] levels, and
//! allocates at most in proportion to its input (which the callers bound).

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt::Write as _;

/// Deepest nesting of arrays and objects [`parse`] accepts.
pub const MAX_DEPTH: usize = 32;

/// A JSON value. Objects keep their members in input order (duplicate keys are kept; lookups
/// find the first).
#[derive(Clone, Debug, PartialEq)]
pub enum Json {
    /// `null`
    Null,
    /// `true` or `false`
    Bool(bool),
    /// Any number (as `f64`, which is what iperf3's cJSON uses too).
    Num(f64),
    /// A string, escapes decoded.
    Str(String),
    /// An array.
    Arr(Vec<Json>),
    /// An object: members in input order.
    Obj(Vec<(String, Json)>),
}

impl Json {
    /// The member `key` of an object (`None` for other values or a missing key).
    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Obj(m) => m.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// Follows a path of object keys: `j.path(&["end", "sum_sent", "bytes"])`.
    pub fn path(&self, keys: &[&str]) -> Option<&Json> {
        keys.iter().try_fold(self, |j, k| j.get(k))
    }

    /// The number, if this is one.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Json::Num(n) => Some(n),
            _ => None,
        }
    }

    /// The number as a non-negative integer, if it is one that fits (fractions truncated).
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Json::Num(n) if (0.0..18_446_744_073_709_551_616.0).contains(&n) => Some(n as u64),
            _ => None,
        }
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Json::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The elements, if this is an array.
    pub fn as_array(&self) -> Option<&[Json]> {
        match self {
            Json::Arr(a) => Some(a),
            _ => None,
        }
    }

    /// Whether this is JSON `true`. (iperf3 flags such as `"reverse": true` are present-or-absent;
    /// use [`get`](Self::get)`.is_some()` for those.)
    pub fn is_true(&self) -> bool {
        matches!(self, Json::Bool(true))
    }

    /// Serialises without whitespace (what cJSON's `PrintUnformatted` gives).
    pub fn to_compact(&self) -> String {
        let mut s = String::new();
        self.write(&mut s);
        s
    }

    fn write(&self, out: &mut String) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Num(n) => write_number(out, *n),
            Json::Str(s) => write_string(out, s),
            Json::Arr(a) => {
                out.push('[');
                for (i, v) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    v.write(out);
                }
                out.push(']');
            }
            Json::Obj(m) => {
                out.push('{');
                for (i, (k, v)) in m.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_string(out, k);
                    out.push(':');
                    v.write(out);
                }
                out.push('}');
            }
        }
    }
}

impl From<u64> for Json {
    fn from(n: u64) -> Json {
        Json::Num(n as f64)
    }
}

impl From<i64> for Json {
    fn from(n: i64) -> Json {
        Json::Num(n as f64)
    }
}

impl From<f64> for Json {
    fn from(n: f64) -> Json {
        Json::Num(n)
    }
}

impl From<&str> for Json {
    fn from(s: &str) -> Json {
        Json::Str(s.to_string())
    }
}

/// Builds an object from `(key, value)` pairs.
pub fn object<const N: usize>(members: [(&str, Json); N]) -> Json {
    Json::Obj(
        members
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    )
}

fn write_number(out: &mut String, n: f64) {
    if !n.is_finite() {
        // JSON has no NaN or infinity.
        out.push_str("null");
    } else if n.abs() < 9.0e15 && (n as i64) as f64 == n {
        // A whole number (exactly representable as i64 in this range): no ".0", as cJSON.
        let _ = write!(out, "{}", n as i64);
    } else {
        let _ = write!(out, "{n}");
    }
}

fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Why [`parse`] rejected its input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// Byte offset where parsing stopped.
    pub offset: usize,
    /// What was wrong there.
    pub what: &'static str,
}

impl core::fmt::Display for ParseError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "bad JSON at byte {}: {}", self.offset, self.what)
    }
}

impl core::error::Error for ParseError {}

/// Parses one JSON value (surrounding whitespace allowed, nothing else after it).
pub fn parse(input: &[u8]) -> Result<Json, ParseError> {
    let mut p = Parser { s: input, i: 0 };
    let v = p.value(0)?;
    p.ws();
    if p.i != input.len() {
        return Err(p.err("trailing characters"));
    }
    Ok(v)
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn err(&self, what: &'static str) -> ParseError {
        ParseError {
            offset: self.i,
            what,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn eat(&mut self, lit: &[u8]) -> bool {
        if self.s[self.i..].starts_with(lit) {
            self.i += lit.len();
            true
        } else {
            false
        }
    }

    fn value(&mut self, depth: usize) -> Result<Json, ParseError> {
        if depth > MAX_DEPTH {
            return Err(self.err("nested too deeply"));
        }
        self.ws();
        match self.peek() {
            None => Err(self.err("unexpected end")),
            Some(b'{') => {
                self.i += 1;
                let mut members = Vec::new();
                self.ws();
                if self.eat(b"}") {
                    return Ok(Json::Obj(members));
                }
                loop {
                    self.ws();
                    if self.peek() != Some(b'"') {
                        return Err(self.err("expected a key"));
                    }
                    let k = self.string()?;
                    self.ws();
                    if !self.eat(b":") {
                        return Err(self.err("expected ':'"));
                    }
                    let v = self.value(depth + 1)?;
                    members.push((k, v));
                    self.ws();
                    if self.eat(b",") {
                        continue;
                    }
                    if self.eat(b"}") {
                        return Ok(Json::Obj(members));
                    }
                    return Err(self.err("expected ',' or '}'"));
                }
            }
            Some(b'[') => {
                self.i += 1;
                let mut items = Vec::new();
                self.ws();
                if self.eat(b"]") {
                    return Ok(Json::Arr(items));
                }
                loop {
                    items.push(self.value(depth + 1)?);
                    self.ws();
                    if self.eat(b",") {
                        continue;
                    }
                    if self.eat(b"]") {
                        return Ok(Json::Arr(items));
                    }
                    return Err(self.err("expected ',' or ']'"));
                }
            }
            Some(b'"') => self.string().map(Json::Str),
            Some(b't') if self.eat(b"true") => Ok(Json::Bool(true)),
            Some(b'f') if self.eat(b"false") => Ok(Json::Bool(false)),
            Some(b'n') if self.eat(b"null") => Ok(Json::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.err("unexpected character")),
        }
    }

    fn number(&mut self) -> Result<Json, ParseError> {
        let start = self.i;
        while matches!(
            self.peek(),
            Some(b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
        ) {
            self.i += 1;
        }
        core::str::from_utf8(&self.s[start..self.i])
            .ok()
            .and_then(|t| t.parse::<f64>().ok())
            .map(Json::Num)
            .ok_or(ParseError {
                offset: start,
                what: "bad number",
            })
    }

    fn hex4(&mut self) -> Result<u32, ParseError> {
        let h = self
            .s
            .get(self.i..self.i + 4)
            .and_then(|h| core::str::from_utf8(h).ok())
            .and_then(|h| u32::from_str_radix(h, 16).ok())
            .ok_or(self.err("bad \\u escape"))?;
        self.i += 4;
        Ok(h)
    }

    fn string(&mut self) -> Result<String, ParseError> {
        self.i += 1; // the opening quote
        let mut out = Vec::new();
        loop {
            let Some(c) = self.peek() else {
                return Err(self.err("unterminated string"));
            };
            self.i += 1;
            match c {
                b'"' => break,
                b'\\' => {
                    let Some(e) = self.peek() else {
                        return Err(self.err("unterminated escape"));
                    };
                    self.i += 1;
                    match e {
                        b'"' => out.push(b'"'),
                        b'\\' => out.push(b'\\'),
                        b'/' => out.push(b'/'),
                        b'b' => out.push(8),
                        b'f' => out.push(12),
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'u' => {
                            let mut cp = self.hex4()?;
                            if (0xD800..0xDC00).contains(&cp) && self.eat(b"\\u") {
                                let lo = self.hex4()?;
                                if (0xDC00..0xE000).contains(&lo) {
                                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                                }
                            }
                            let ch = char::from_u32(cp).unwrap_or(char::REPLACEMENT_CHARACTER);
                            let mut b = [0u8; 4];
                            out.extend_from_slice(ch.encode_utf8(&mut b).as_bytes());
                        }
                        _ => return Err(self.err("bad escape")),
                    }
                }
                c if c < 0x20 => return Err(self.err("control character in string")),
                c => out.push(c),
            }
        }
        String::from_utf8(out).map_err(|_| self.err("string is not UTF-8"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_iperf_params() {
        let text = br#"{"tcp":true,"omit":0,"time":2,"parallel":4,"reverse":true,"len":131072,"client_version":"3.12"}"#;
        let j = parse(text).unwrap();
        assert!(j.get("tcp").unwrap().is_true());
        assert_eq!(j.get("parallel").unwrap().as_u64(), Some(4));
        assert_eq!(j.get("client_version").unwrap().as_str(), Some("3.12"));
        assert_eq!(j.to_compact().as_bytes(), &text[..]);
    }

    #[test]
    fn nested_paths_escapes_and_numbers() {
        let j = parse(
            br#" {"end": {"sum": {"bps": 1.5e9, "s": "a\"b\u00e9\n"}}, "a": [1, -2, 3.25]} "#,
        )
        .unwrap();
        assert_eq!(
            j.path(&["end", "sum", "bps"]).unwrap().as_f64(),
            Some(1.5e9)
        );
        assert_eq!(
            j.path(&["end", "sum", "s"]).unwrap().as_str(),
            Some("a\"b\u{e9}\n")
        );
        assert_eq!(j.get("a").unwrap().as_array().unwrap().len(), 3);
        let again = parse(j.to_compact().as_bytes()).unwrap();
        assert_eq!(again, j);
    }

    #[test]
    fn rejects_garbage_without_panicking() {
        let deep = "[".repeat(MAX_DEPTH + 5);
        let bad: [&[u8]; 12] = [
            b"",
            b"{",
            b"{\"a\"",
            b"{\"a\":}",
            b"[1,]",
            b"\"abc",
            b"\"\\u12\"",
            b"tru",
            b"1 2",
            b"{1:2}",
            b"\"\xff\"",
            deep.as_bytes(),
        ];
        for b in bad {
            assert!(parse(b).is_err(), "{:?}", String::from_utf8_lossy(b));
        }
        // Every prefix of a valid document: an error or a value, never a panic.
        let doc = br#"{"k":[1,2,{"x":"\u00e9\\"}],"n":-1.5e3,"t":true,"z":null}"#;
        for i in 0..doc.len() {
            let _ = parse(&doc[..i]);
        }
        assert!(parse(doc).is_ok());
    }
}
