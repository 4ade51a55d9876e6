# frozen_string_literal: true

require 'json'

class SessiondStore
  # Entries to the bytes sessiond stores, and back.
  module Codec
    module_function

    # One entry as compact JSON in UTF-8, key order kept, non-ASCII written
    # as itself. Raises ArgumentError for what JSON cannot hold (NaN,
    # infinities, strings that are not valid UTF-8), naming the entry.
    def encode(entry, index = 0)
      raise ArgumentError, "entry #{index} is a #{entry.class}, not a Hash (one JSON object per transcript line)" unless entry.is_a?(Hash)

      JSON.generate(entry).b
    rescue JSON::GeneratorError, Encoding::UndefinedConversionError, EncodingError => e
      raise ArgumentError, "entry #{index} cannot be stored as JSON: #{e.message}"
    end

    # A stored line back to its Hash; nil for a line that is not one JSON
    # object (the SDK's readers skip such lines too).
    def decode(data)
      text = data.dup.force_encoding(Encoding::UTF_8)
      return nil unless text.valid_encoding?

      value = JSON.parse(text)
      value.is_a?(Hash) ? value : nil
    rescue JSON::ParserError
      nil
    end
  end
end
