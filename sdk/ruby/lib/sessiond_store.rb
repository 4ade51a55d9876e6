# frozen_string_literal: true

# A SessionStore for the Ruby Agent SDK (claude-agent-sdk) that keeps the
# transcripts in sessiond, the local transcript daemon:
#
#   require 'sessiond_store'
#   options = ClaudeAgentSDK::ClaudeAgentOptions.new(session_store: SessiondStore.new)
require_relative 'sessiond_store/store'
