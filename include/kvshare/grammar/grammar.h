// kvshare/grammar/grammar.h — constrained decoding: a JSON Schema compiled into a
// byte-level grammar, and a per-request matcher that gives, before each
// sampled token, the set of tokens that keep the output a prefix of a valid
// document (runtime layer; the server's response_format builds on it, and a
// tool's `parameters` schema can be compiled the same way).
//
// JSON Schema (CompileJsonSchema), drafts 4, 6, 7, 2019-09 and 2020-12:
//   type (a name or an array), properties, required, additionalProperties
//   (a boolean or a schema), patternProperties, propertyNames,
//   minProperties / maxProperties, dependentRequired (and draft 4-7's array
//   form of dependencies: the dependents are made required), items (a schema,
//   or an array with additionalItems), prefixItems, minItems / maxItems,
//   minLength / maxLength, pattern (ECMA-262 without backreferences, word
//   boundaries and lookaround other than lookaheads at the start of an
//   alternative or of one class before one character; \d \s \w and their complements as both ECMA-262 and
//   Python's re read them; next to a length bound it does not imply, its
//   repetitions are narrowed to fit), format (date-time, date, time,
//   duration, email, hostname, ipv4, ipv6, uuid, uri: exact or narrower
//   grammars; iri, iri-reference, uri-reference, idn-email, idn-hostname,
//   json-pointer, relative-json-pointer, regex, uri-template: narrower
//   stand-ins), uniqueItems: true (items of at most 64 enum / const values
//   or booleans: each at most once, in the schema's order; other items: at
//   most one item, refused when minItems > 1), minimum /
//   maximum / exclusiveMinimum / exclusiveMaximum in both drafts' forms
//   (exact; fractional bounds on numbers are refused), multipleOf (10^-p on
//   numbers, any k on a bounded integer range of at most 1024 multiples),
//   enum / const of any JSON value, anyOf, oneOf (when no branch's output is
//   valid against another branch, after narrowing), allOf (merged; patterns
//   and formats intersected), siblings of anyOf / oneOf (moved into each
//   branch) and of $ref (merged from 2019-09 on, ignored before), local $refs
//   (JSON pointers, recursion through an object or array), if / then / else
//   with a discriminator `if` (properties of const / enum strings, booleans
//   or null, required, type object), not of const / enum, type, required,
//   pattern and anyOf / allOf of those, unevaluatedProperties next to allOf
//   / $ref (not next to anyOf / oneOf branches that declare properties).
//   Annotations and unknown keywords are ignored, as the spec says. What a
//   grammar cannot enforce exactly (not and if of other schemas, contains,
//   unevaluatedItems, dependentSchemas, $dynamicRef, remote or anchor $refs,
//   ...) is a compile error naming the keyword
//   and its JSON pointer ("unsupported JSON Schema keyword 'contains' at
//   #/properties/tags/contains: ...").
// Output shape (all of it valid against the schema):
//   - objects hold only their declared properties (and the required ones it
//     does not declare), in declaration order, required ones always; one
//     whose declared properties are all forbidden is written as {};
//     additionalProperties / patternProperties / propertyNames give the keys
//     and values of objects that declare no properties (maps);
//   - a keyword of one type implies it ({"minimum": 0} writes numbers only);
//   - bounded numbers are written without an exponent;
//   - strings: UTF-8 (strict: no surrogates, no overlongs) or the escapes
//     \" \\ \/ \b \f \n \r \t \uXXXX (XXXX not a surrogate), so each escape or
//     character counts as one code point for minLength / maxLength;
//   - numbers: -?(0|[1-9]d*)(.d+)?([eE][+-]?d+)? with at most 16 integer
//     digits, 16 fraction digits and 3 exponent digits (integers: no fraction
//     or exponent), so no value can grow forever;
//   - enum / const values are written as compact JSON;
//   - between tokens at most JsonGrammarOptions::max_whitespace bytes of
//     whitespace per gap, also before the top-level value; nothing after it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvshare {

class Tokenizer;

// A compiled grammar: immutable, shared by the matchers of many requests.
class Grammar;

struct JsonGrammarOptions {
  // Whitespace bytes (space, \t, \n, \r) allowed in each gap between JSON
  // tokens, >= 0 (0: compact output only). Bounded so that a model cannot
  // loop on whitespace.
  int max_whitespace = 8;
};

// Compiles a JSON Schema (JSON text) into a grammar of the JSON documents
// described above. Throws kvshare::Error for invalid JSON, an unsupported
// keyword ("unsupported JSON Schema keyword 'not' at #/properties/id/not: ..."),
// a malformed value of a supported one, an unresolvable $ref, a schema that
// matches nothing (minItems > maxItems, required property not declared),
// minLength / minItems / minProperties above 4096 (maxLength / maxItems /
// maxProperties above it are lowered to it), an object of more than 1024
// members, a text nested deeper than 256 arrays / objects, or schemas
// nested deeper than 128 (properties, items, anyOf, $ref hops: the compiler
// recurses once per level).
std::shared_ptr<const Grammar> CompileJsonSchema(std::string_view schema, const JsonGrammarOptions& options = {});

// Any JSON object (OpenAI's response_format {"type": "json_object"}).
std::shared_ptr<const Grammar> AnyJsonObjectGrammar(const JsonGrammarOptions& options = {});

// Exactly the bytes of `text` (non-empty; throws kvshare::Error otherwise).
std::shared_ptr<const Grammar> LiteralGrammar(std::string_view text);

// A lazy grammar (llama.cpp's name): the output is free text until a trigger
// appears in it, and from the trigger's first byte on it must be a document
// of the body grammar (a tool call after its opening marker). The trigger is
// found at the byte level, so it may come as one token or split across
// several; a token that would complete a trigger with bytes the body refuses
// is masked like any other. End tokens are allowed in free text and after a
// complete body, never inside one.
struct LazyGrammarOptions {
  // Non-null: a grammar whose complete documents are the trigger texts
  // (LiteralGrammar("<|tool_call>"), or a pattern with optional whitespace),
  // searched for at every byte of the free text.
  std::shared_ptr<const Grammar> trigger;
  // Tokens that TokenTrie::FromTokenizer leaves out (control tokens) but the
  // output may hold, with the text they stand for (Gemma 4's call markers):
  // the trigger and the body see that text. Ids must be in the vocabulary.
  std::vector<std::pair<std::int32_t, std::string>> token_text;
  // After a complete body: true, free text again (another trigger starts
  // another body); false, only an end token may follow.
  bool repeat = false;
};
// Throws kvshare::Error for a null body or trigger, or a lazy body.
std::shared_ptr<const Grammar> LazyGrammar(std::shared_ptr<const Grammar> body, LazyGrammarOptions options);

// A vocabulary's tokens as byte strings in a prefix trie, built once per
// vocabulary and shared (read-only) by every matcher.
class TokenTrie {
 public:
  // token_bytes[id]: the bytes token id adds to the text; empty: never
  // allowed inside a document (control tokens). Throws kvshare::Error when
  // there are more than 2^31 - 1 tokens.
  explicit TokenTrie(std::span<const std::string> token_bytes);
  // The tokenizer's decoded bytes (Tokenizer::TokenBytes); special tokens
  // (IsSpecialToken) get none: they are never allowed.
  static std::shared_ptr<const TokenTrie> FromTokenizer(const Tokenizer& tokenizer);
  ~TokenTrie();
  TokenTrie(const TokenTrie&) = delete;
  TokenTrie& operator=(const TokenTrie&) = delete;

  std::int32_t vocab_size() const;
  std::size_t num_nodes() const;  // including the root
  // The bytes of token `id` as given (empty: never allowed); id in [0, vocab).
  std::string_view token_bytes(std::int32_t id) const;
  // The tokens whose bytes start with `byte`, in the trie's order.
  std::span<const std::int32_t> tokens_starting_with(unsigned char byte) const;
  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// Whether token `id` is special: never inside constrained text, so left out
// of TokenTrie::FromTokenizer. CONTROL, UNKNOWN and UNUSED tokens, and
// USER_DEFINED ones other than runs of whitespace: GGUF marks the added
// tokens USER_DEFINED whether they are markers (Gemma 4's <|tool_call>,
// <|channel>, <|"|>; Gemma 3's <start_of_image>) or text (Gemma 3's <table>),
// and their text is printable, so a grammar reading tokens by their text
// would let a marker into a JSON string. Whitespace runs ("\n\n", "  ") stay:
// JSON's gaps and strings use them. Any text stays writable with ordinary
// and byte tokens. Throws kvshare::Error for an id outside the vocabulary.
bool IsSpecialToken(const Tokenizer& tokenizer, std::int32_t id);

// The state of one output under a grammar. Not thread-safe; one per request.
class GrammarMatcher {
 public:
  // end_tokens: the ids that end generation (EOS, end of turn, stop tokens),
  // allowed exactly when the document is complete. Throws kvshare::Error for
  // a null grammar or trie, or an end token (or a lazy grammar's token_text
  // id) outside [0, vocab). A lazy grammar (LazyGrammar) is matched as it
  // describes: the methods below speak of the whole output, free text
  // included.
  GrammarMatcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> vocab,
                 std::vector<std::int32_t> end_tokens);
  ~GrammarMatcher();
  GrammarMatcher(GrammarMatcher&&) noexcept;
  GrammarMatcher& operator=(GrammarMatcher&&) noexcept;

  // Advances by one token: true when the grammar allows it here (an end
  // token: when the document is complete; the matcher is then terminated),
  // false (state unchanged) otherwise. Throws kvshare::Error for an id
  // outside [0, vocab).
  bool AcceptToken(std::int32_t id);
  // Advances by raw bytes; false (state unchanged) when they leave the
  // grammar's prefixes.
  bool AcceptBytes(std::string_view bytes);
  // Whether AcceptBytes(bytes) would succeed, without advancing.
  bool CanAcceptBytes(std::string_view bytes);

  // The tokens AcceptToken would take now, as bits: mask[id / 64] bit
  // id % 64. mask.size() must be (vocab + 63) / 64 (throws kvshare::Error
  // otherwise). Costs a walk of the trie's nodes whose prefixes are still
  // valid; subtrees of plain string content that fit the string's
  // maxLength are taken whole, and the masks of the last 8 states (a
  // bounded repetition's states far from its bound count as one) are
  // reused.
  void FillNextTokenMask(std::span<std::uint64_t> mask);
  // Sets logits[id] to -inf for every token not in the mask above.
  // logits.size() must be the vocabulary size.
  void MaskLogits(std::span<float> logits);

  // The bytes so far form a complete document (an end token may follow).
  bool CanEnd() const;
  // An end token was accepted: nothing may follow.
  bool Terminated() const;
  // Lazy grammars: how many bodies a trigger has started so far (0 for a
  // grammar that is not lazy).
  int Triggered() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvshare
