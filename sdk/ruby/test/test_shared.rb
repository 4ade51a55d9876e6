# frozen_string_literal: true

# The three lines on defaults: an agent whose config dir is sessiond's root
# (both ~/.claude). The CLI writes its own copy of every line into the
# transcript sessiond owns, then the SDK mirrors the same lines through the
# store: each line is held once, and the summary stays whole without
# folding the transcript again each turn.

require_relative 'helper'
require 'fileutils'
require 'json'

class TestShared < Minitest::Test
  COUNT_FOLD = lambda do |prev, key, entries|
    data = prev ? prev['data'].dup : {}
    data['count'] = data.fetch('count', 0) + entries.length
    { 'session_id' => key['session_id'], 'mtime' => 0, 'data' => data }
  end

  # Counts what it asks the daemon, by the first word of the call.
  class CountingStore < SessiondStore
    attr_reader :asked

    def initialize(**kw)
      super
      @asked = []
    end

    private

    def call(what, **kw, &block)
      @asked << what.split(' ').first
      super
    end
  end

  def setup
    @daemon = TestSupport.shared_daemon
    @project = "-tmp-sdrb-shared-#{SecureRandom.hex(6)}"
  end

  def cli_write(session_id, lines)
    folder = File.join(@daemon.root, 'projects', @project)
    FileUtils.mkdir_p(folder)
    File.open(File.join(folder, "#{session_id}.jsonl"), 'a') do |f|
      lines.each { |l| f.write(JSON.generate(l) + "\n") }
    end
  end

  def cli_turn(session_id, n, parent)
    u = SecureRandom.uuid
    user = { 'type' => 'user', 'uuid' => u, 'parentUuid' => parent, 'sessionId' => session_id,
             'message' => { 'role' => 'user', 'content' => "prompt #{n}" } }
    latch = { 'type' => 'atis-latch', 'sessionId' => session_id }
    api = { 'type' => 'api-request', 'requestId' => "req_#{n}", 'sessionId' => session_id }
    last = { 'type' => 'last-prompt', 'lastPrompt' => "prompt #{n}", 'sessionId' => session_id }
    [[latch, user, api, latch, last], [latch, user, latch, last], u]
  end

  def test_config_dir_is_the_root
    s = CountingStore.new(socket_path: @daemon.socket, agent_config_dir: @daemon.root, fold: COUNT_FOLD)
    sid = SecureRandom.uuid
    k = TestSupport.key(@project, sid)
    parent = nil
    want = []
    (1..3).each do |n|
      lines, mirrored, parent = cli_turn(sid, n, parent)
      cli_write(sid, lines)
      want.concat(lines)
      s.asked.clear
      s.append(k, mirrored)
      assert_equal ['append'], s.asked, "turn #{n} folded the whole transcript again" if n > 1
    end
    assert_equal want, s.load(k)
    row = s.list_session_summaries(@project).find { |r| r['session_id'] == sid }
    # Turn 1 folded the transcript (the CLI's 5 lines) and its batch of 4
    # (see the README's limits); each later turn its batch alone.
    assert_equal 5 + 4 + 4 + 4, row['data']['count']
  ensure
    s&.close
  end
end
