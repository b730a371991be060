//! Configuration JSON into typed values with typed errors (feature `std`).
//!
//! `serde_json` reports an unknown key or type only as text. To tell them apart without reading
//! that text, the JSON is first parsed into a [`serde_json::Value`] (syntax errors are
//! [`CatalogError::Json`]) and then deserialized through [`ValueDeserializer`], whose error type
//! is [`Shape`]: serde calls [`de::Error::unknown_field`] and [`de::Error::unknown_variant`] on it,
//! so those arrive as values naming the key and what was expected.

use std::borrow::ToOwned;
use std::string::{String, ToString};
use std::vec::Vec;
use std::{fmt, format};

use serde::de::value::{MapDeserializer, SeqDeserializer};
use serde::de::{self, DeserializeOwned, IntoDeserializer, Visitor};
use serde_json::Value;

use super::catalog_config::CatalogError;

/// Parses `text` as the configuration `T`.
///
/// # Errors
///
/// [`CatalogError::Json`] for text that is not JSON, [`CatalogError::UnknownKey`] and
/// [`CatalogError::UnknownType`] naming the key or type, [`CatalogError::Shape`] for a value of the
/// wrong type or a missing key.
pub fn parse<T: DeserializeOwned>(text: &str) -> Result<T, CatalogError> {
    let value: Value = serde_json::from_str(text).map_err(|e| CatalogError::Json {
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })?;
    T::deserialize(ValueDeserializer(&value)).map_err(|shape| match shape {
        Shape::UnknownField { key, expected } => CatalogError::UnknownKey { key, expected },
        Shape::UnknownVariant { name, expected } => CatalogError::UnknownType { name, expected },
        Shape::Other(message) => CatalogError::Shape { message },
    })
}

/// A deserialization error, with the two kinds a host reports apart kept as values.
#[derive(Debug)]
enum Shape {
    UnknownField {
        key: String,
        expected: &'static [&'static str],
    },
    UnknownVariant {
        name: String,
        expected: &'static [&'static str],
    },
    Other(String),
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Shape::UnknownField { key, .. } => write!(f, "unknown key {key:?}"),
            Shape::UnknownVariant { name, .. } => write!(f, "unknown type {name:?}"),
            Shape::Other(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for Shape {}

impl de::Error for Shape {
    fn custom<M: fmt::Display>(msg: M) -> Self {
        Shape::Other(msg.to_string())
    }

    fn unknown_field(field: &str, expected: &'static [&'static str]) -> Self {
        Shape::UnknownField {
            key: field.to_owned(),
            expected,
        }
    }

    fn unknown_variant(variant: &str, expected: &'static [&'static str]) -> Self {
        Shape::UnknownVariant {
            name: variant.to_owned(),
            expected,
        }
    }
}

/// A borrowed JSON value as a serde deserializer whose error is [`Shape`].
#[derive(Clone, Copy)]
struct ValueDeserializer<'a>(&'a Value);

impl IntoDeserializer<'_, Shape> for ValueDeserializer<'_> {
    type Deserializer = Self;

    fn into_deserializer(self) -> Self {
        self
    }
}

impl<'de> de::Deserializer<'de> for ValueDeserializer<'_> {
    type Error = Shape;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Shape> {
        match self.0 {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    visitor.visit_u64(u)
                } else if let Some(i) = n.as_i64() {
                    visitor.visit_i64(i)
                } else {
                    // Finite by construction: JSON has no NaN or infinity.
                    visitor.visit_f64(n.as_f64().unwrap_or(f64::NAN))
                }
            }
            Value::String(s) => visitor.visit_str(s),
            Value::Array(items) => {
                let mut seq = SeqDeserializer::new(items.iter().map(ValueDeserializer));
                let value = visitor.visit_seq(&mut seq)?;
                seq.end()?;
                Ok(value)
            }
            Value::Object(map) => {
                let mut entries = MapDeserializer::new(
                    map.iter()
                        .map(|(k, v)| (k.as_str().into_deserializer(), ValueDeserializer(v))),
                );
                let value = visitor.visit_map(&mut entries)?;
                entries.end()?;
                Ok(value)
            }
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Shape> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Shape> {
        // Externally tagged unit variants arrive as strings (`"metric": "active_blocks"`).
        match self.0 {
            Value::String(s) => visitor.visit_enum(s.as_str().into_deserializer()),
            other => Err(de::Error::custom(format!(
                "expected a string naming a variant, found {}",
                kind(other)
            ))),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Shape> {
        visitor.visit_newtype_struct(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct seq tuple tuple_struct map struct identifier ignored_any
    }
}

/// What kind of JSON value `v` is, for messages.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The expected names, for messages: `` `a`, `b` ``.
pub(crate) fn names(expected: &[&str]) -> String {
    expected
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}
