# frozen_string_literal: true

# The Ruby Agent SDK's SessionStore conformance kit
# (ClaudeAgentSDK::Testing.run_session_store_conformance), unmodified, run
# against SessiondStore with the advisory uuid-dedupe contract on.
#
# The kit names its sessions "sess", "a", "main"... and its projects "proj",
# "A", "B" in every contract, and calls make_store once per contract for
# isolation: each store here talks to a daemon of its own on an empty root.

require_relative 'helper'

class TestKit < Minitest::Test
  def test_the_ruby_sdk_conformance_kit_passes
    TestSupport.load_sdk
    daemons = []
    stores = []
    make_store = lambda do
      d = TestSupport::Daemon.start('sdrb-kit-')
      daemons << d
      # The default fold: the SDK's own fold_session_summary, found because
      # the SDK is loaded.
      store = SessiondStore.new(socket_path: d.socket)
      stores << store
      store
    end
    begin
      result = ClaudeAgentSDK::Testing.run_session_store_conformance(make_store, check_uuid_dedupe: true)
    ensure
      stores.each(&:close)
      codes = daemons.map(&:stop)
    end
    assert_nil result
    assert_equal ClaudeAgentSDK::SessionSummary.method(:fold_session_summary), stores.first.fold
    # A probe store, then one per contract group.
    assert_operator daemons.length, :>=, 15
    assert_equal [0] * daemons.length, codes, 'every sessiond stopped cleanly on SIGTERM'
    daemons.each(&:remove)
  end
end
