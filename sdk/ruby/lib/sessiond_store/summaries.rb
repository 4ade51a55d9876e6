# frozen_string_literal: true

require 'json'

class SessiondStore
  # Session summaries: where the fold comes from, how a summary is stored,
  # and what this store knows of each session's.
  module Summaries
    # sessiond's limit on a summary (SummaryUpdate.data).
    MAX_BYTES = 32 << 10

    # Fields only the TypeScript SDK's foldSessionSummary writes (the Ruby
    # and Python SDKs spell them in snake_case). A summary holding them was
    # folded by a TypeScript store sharing the daemon; the Ruby SDK cannot
    # read it.
    TS_FIELDS = %w[isSidechain createdAt commandFallback firstPrompt firstPromptLocked customTitle aiTitle
                   lastPrompt summaryHint gitBranch].freeze

    # A session's summary as this store knows it: the version sessiond gave
    # it (the compare-and-swap token), the summary ({ 'session_id', 'mtime',
    # 'data' }; nil before the first), how many lines it covers when known,
    # and rebuild when lines were appended without it (the next append then
    # folds the whole transcript).
    Known = Struct.new(:version, :summary, :covered, :rebuild)

    # Known summaries by [project_key, session_id], shared by threads.
    class Cache
      def initialize
        @lock = Mutex.new
        @by_session = {}
      end

      def get(key)
        @lock.synchronize { @by_session[key]&.dup }
      end

      def put(key, known)
        @lock.synchronize { @by_session[key] = known }
      end

      def delete(key)
        @lock.synchronize { @by_session.delete(key) }
      end
    end

    @warn_lock = Mutex.new
    @sdk_warned = false

    class << self
      # The SDK's fold_session_summary, loading the SDK's summary code when
      # the application has not loaded the SDK yet; nil, with a warning
      # (once per process), when it cannot be loaded.
      def sdk_fold(store)
        unless defined?(ClaudeAgentSDK::SessionSummary)
          begin
            require 'set' # the SDK uses Set without requiring it (Ruby < 3.2)
            require 'claude_agent_sdk/session_summary'
          rescue LoadError, StandardError => e
            warn_once(store, e)
            return nil
          end
        end
        ClaudeAgentSDK::SessionSummary.method(:fold_session_summary)
      end

      def warn_once(store, error)
        first = @warn_lock.synchronize do
          was = @sdk_warned
          @sdk_warned = true
          !was
        end
        return unless first

        store.warning(
          "the Ruby Agent SDK (claude-agent-sdk) could not be loaded (#{error.class}: #{error.message}), so this " \
          'store keeps no session summaries: list_session_summaries returns only those other writers stored, ' \
          "and the SDK's session listings load every other session in full. Load the SDK before the first " \
          "append (require 'claude_agent_sdk'), or pass fold: to SessiondStore.new (a callable, or nil to " \
          'turn summaries off knowingly).'
        )
      end

      # A stored summary's data; nil when it is not a JSON object.
      def json_object(bytes)
        return nil if bytes.nil? || bytes.empty?

        value = JSON.parse(bytes.dup.force_encoding(Encoding::UTF_8))
        value.is_a?(Hash) ? value : nil
      rescue JSON::ParserError, EncodingError
        nil
      end

      def ours?(data)
        data.is_a?(Hash) && (data.keys & TS_FIELDS).empty?
      end

      # The summary as sessiond stores it. One over sessiond's limit (a huge
      # title or prompt) has its longest strings halved until it fits, as
      # the other adapters do, rather than being dropped: a dropped summary
      # makes every later append fold the whole transcript again.
      def encode(data)
        out = JSON.generate(data).b
        return out if out.bytesize <= MAX_BYTES

        copy = data.dup
        while out.bytesize > MAX_BYTES
          longest = copy.select { |_, v| v.is_a?(String) }.max_by { |_, v| v.length }
          break if longest.nil? || longest[1].length <= 64

          copy[longest[0]] = longest[1][0, [64, longest[1].length / 2].max]
          out = JSON.generate(copy).b
        end
        out
      end
    end
  end
end
