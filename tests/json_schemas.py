"""A JSON schema the structured-output tests ask tiny random-weight models to follow: bounded (a short string, an
integer range, an enum, a boolean), so an answer completes in about 50 tokens of the test tokenizer."""

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 5},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "ok": {"type": "boolean"},
        "color": {"enum": ["red", "green", "blue"]},
    },
    "required": ["name", "age", "ok", "color"],
    "additionalProperties": False,
}
