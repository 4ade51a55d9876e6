# frozen_string_literal: true

# SessiondStore's own promises beyond the kit: batch ids across the SDK's
# retries, order and atomicity under threads, summaries kept by several
# writers, the SDK missing, and errors a person can act on.

require_relative 'helper'
require 'open3'

class TestStore < Minitest::Test
  def setup
    @daemon = TestSupport.shared_daemon
    @project = "-tmp-sdrb-#{SecureRandom.hex(6)}"
  end

  def store(**kw)
    s = SessiondStore.new(socket_path: @daemon.socket, fold: nil, **kw)
    (@stores ||= []) << s
    s
  end

  def teardown
    (@stores || []).each(&:close)
  end

  def key(session_id = SecureRandom.uuid, subpath = nil)
    TestSupport.key(@project, session_id, subpath)
  end

  def test_an_empty_append_calls_nobody
    s = SessiondStore.new(socket_path: '/nonexistent-sdrb/s.sock', fold: nil)
    assert_nil s.append(key, [])
  end

  # The daemon stores a batch, then its answer is lost: the store raises,
  # and the SDK calls append again with the same entries. Entries without
  # a uuid would be stored twice, but the retry goes under the failed
  # call's batch id and stores nothing.
  class LosesTheFirstAnswer < SessiondStore
    attr_reader :batch_ids_sent

    def initialize(**kw)
      super
      @lost = false
      @batch_ids_sent = []
    end

    private

    def call(what, **kw, &block)
      super(what, **kw) do |stub, deadline|
        result = block.call(RecordingStub.new(stub, @batch_ids_sent), deadline)
        unless @lost || !what.start_with?('append')
          @lost = true
          raise SessiondUnavailableError.new('the answer was lost (test)', code: GRPC::Core::StatusCodes::UNAVAILABLE)
        end
        result
      end
    end
  end

  class RecordingStub
    def initialize(stub, ids)
      @stub = stub
      @ids = ids
    end

    def append(request, **kw)
      @ids << request.batch_id
      @stub.append(request, **kw)
    end

    def method_missing(name, *args, **kw, &block)
      @stub.send(name, *args, **kw, &block)
    end

    def respond_to_missing?(name, include_private = false)
      @stub.respond_to?(name, include_private) || super
    end
  end

  def test_the_sdks_retry_of_a_failed_append_is_stored_once
    s = LosesTheFirstAnswer.new(socket_path: @daemon.socket, fold: nil, tries: 1)
    @stores = [s]
    k = key
    entries = [{ 'type' => 'progress', 'n' => 1 }, { 'type' => 'progress', 'n' => 2 }] # no uuid
    assert_raises(SessiondStore::SessiondUnavailableError) { s.append(k, entries) }
    s.append(k, entries) # the SDK's retry
    assert_equal entries, s.load(k)
    assert_equal 2, s.batch_ids_sent.length
    assert_equal s.batch_ids_sent[0], s.batch_ids_sent[1], 'the retry reuses the failed batch id'
    # Once it succeeded, the same entries again are a new batch.
    s.append(k, entries)
    assert_equal entries + entries, s.load(k)
    refute_equal s.batch_ids_sent[1], s.batch_ids_sent[2]
  end

  # Holds the first append inside its turn until released.
  class HoldsTheFirstAppend < SessiondStore
    attr_reader :gate

    def initialize(**kw)
      super
      @gate = Queue.new
      @held = false
    end

    # Appends holding or waiting for a turn on the transcript.
    def in_line(key)
      @queues_lock.synchronize do
        @queues[[key['project_key'], key['session_id'], '']]&.users.to_i
      end
    end

    private

    def append_in_order(*args)
      unless @held
        @held = true
        @gate.pop
      end
      super
    end
  end

  def test_a_thread_killed_while_waiting_for_its_turn_blocks_nobody
    s = HoldsTheFirstAppend.new(socket_path: @daemon.socket, fold: nil)
    @stores = [s]
    k = key
    first = Thread.new { s.append(k, [TestSupport.entry('first')]) }
    Thread.pass until first.status == 'sleep' && s.in_line(k) == 1
    waiting = Thread.new { s.append(k, [TestSupport.entry('killed')]) }
    Thread.pass until waiting.status == 'sleep' && s.in_line(k) == 2
    waiting.kill.join
    s.gate << :go
    first.join
    last = Thread.new { s.append(k, [TestSupport.entry('last')]) }
    refute_nil last.join(10), 'the append after the killed one got its turn'
    assert_equal %w[first last], s.load(k).map { |e| e['message']['content'] }
    assert_equal 0, s.in_line(k)
  end

  def test_appends_from_many_threads_stay_whole_and_in_each_threads_order
    s = store
    k = key
    threads = Array.new(8) do |t|
      Thread.new do
        20.times do |i|
          s.append(k, [{ 'type' => 'x', 'uuid' => SecureRandom.uuid, 't' => t, 'i' => i, 'half' => 0 },
                       { 'type' => 'x', 'uuid' => SecureRandom.uuid, 't' => t, 'i' => i, 'half' => 1 }])
        end
      end
    end
    threads.each(&:join)
    loaded = s.load(k)
    assert_equal 8 * 20 * 2, loaded.length
    loaded.each_slice(2) do |a, b|
      assert_equal [a['t'], a['i'], 0, 1], [b['t'], b['i'], a['half'], b['half']], 'a batch is never split'
    end
    8.times do |t|
      assert_equal (0...20).to_a, loaded.select { |e| e['t'] == t && e['half'].zero? }.map { |e| e['i'] }
    end
  end

  def test_a_uuid_the_transcript_holds_is_not_stored_again_and_unicode_round_trips
    s = store
    k = key
    first = TestSupport.entry("héllo \u2028 😀 \\ \"q\"", 'n' => 1.5, 'big' => 2**62, 'nested' => { 'z' => 1, 'a' => [nil, true] })
    s.append(k, [first])
    s.append(k, [first, TestSupport.entry('next')])
    loaded = s.load(k)
    assert_equal 2, loaded.length
    assert_equal first, loaded[0]
    assert_equal first.keys, loaded[0].keys, 'key order is kept'
  end

  def test_summaries_folded_by_two_stores_lose_no_fold
    require_sdk_fold = TestSupport.load_sdk || true
    assert require_sdk_fold
    a = SessiondStore.new(socket_path: @daemon.socket)
    b = SessiondStore.new(socket_path: @daemon.socket)
    @stores = [a, b]
    k = key
    a.append(k, [TestSupport.entry('first prompt', 'customTitle' => 'one')])
    b.append(k, [TestSupport.entry('more', 'customTitle' => 'two')])
    # a's cached summary is now old: sessiond refuses it (SUMMARY_CONFLICT)
    # and a folds onto b's.
    a.append(k, [TestSupport.entry('last', 'gitBranch' => 'main')])
    rows = a.list_session_summaries(@project)
    assert_equal [k['session_id']], rows.map { |r| r['session_id'] }
    data = rows[0]['data']
    assert_equal 'two', data['custom_title']
    assert_equal 'main', data['git_branch']
    assert_equal 'first prompt', data['first_prompt']
    listed = a.list_sessions(@project)
    assert_operator rows[0]['mtime'], :>=, listed[0]['mtime']
  end

  # A read of the transcript to fold onto that fails (a damaged journal
  # record, the daemon out of descriptors) must not keep the batch from
  # being stored: the entries go without a summary, and the next append
  # folds the whole transcript.
  class FailsItsReads < SessiondStore
    attr_accessor :failing

    private

    def call(what, **kw, &block)
      if failing && what.start_with?('read')
        raise SessiondError.new("sessiond #{what}: a journal record failed its checksum (DATA_LOSS)", code: GRPC::Core::StatusCodes::DATA_LOSS)
      end

      super
    end
  end

  def test_a_failing_summary_read_keeps_the_entries
    count = lambda do |prev, k, entries|
      data = prev ? prev['data'].dup : {}
      data['count'] = (data['count'] || 0) + entries.length
      data['batches'] = (data['batches'] || 0) + 1
      { 'session_id' => k['session_id'], 'mtime' => prev ? prev['mtime'] : 0, 'data' => data }
    end
    k = key
    first, second, third, fourth = Array.new(4) { |i| TestSupport.entry("e#{i}") }
    store.append(k, [first, second])
    warnings = []
    logger = Object.new
    logger.define_singleton_method(:warn) { |m| warnings << m }
    a = FailsItsReads.new(socket_path: @daemon.socket, fold: count, logger: logger)
    @stores << a
    a.failing = true
    a.append(k, [third])
    assert(warnings.any? { |w| w.include?('cannot read the summary to fold onto') }, warnings.inspect)
    a.failing = false
    assert_equal [first, second, third], a.load(k)
    a.append(k, [fourth]) # folds the whole transcript, then the batch
    row = a.list_session_summaries(@project).find { |r| r['session_id'] == k['session_id'] }
    assert_equal({ 'count' => 4, 'batches' => 2 }, row && row['data'])
  end

  def test_the_missing_sdk_is_reported_once
    script = <<~RUBY
      require 'sessiond_store'
      s = SessiondStore.new(socket_path: ARGV[0])
      k = { 'project_key' => ARGV[1], 'session_id' => 'nosdk' }
      s.append(k, [{ 'type' => 'user', 'message' => { 'content' => 'hi' } }])
      s.append(k, [{ 'type' => 'user', 'message' => { 'content' => 'again' } }])
      p s.list_session_summaries(ARGV[1])
      p s.load(k).length
    RUBY
    env = { 'RUBYLIB' => nil, 'RUBYOPT' => nil }
    out, err, status = Open3.capture3(env, RbConfig.ruby, '-I', File.join(SDK_DIR, 'lib'), '-e', script,
                                      @daemon.socket, @project)
    assert status.success?, err
    assert_equal "[]\n2\n", out
    assert_equal 1, err.scan('could not be loaded').length, err
    assert_match(/claude-agent-sdk.*keeps no session summaries.*require 'claude_agent_sdk'/m, err)
  end

  def test_a_refusal_says_what_sessiond_said_and_the_code
    err = assert_raises(SessiondStore::SessiondError) { store.append(key('Not/A/Session'), [TestSupport.entry]) }
    assert_equal GRPC::Core::StatusCodes::INVALID_ARGUMENT, err.code
    assert_equal 'INVALID_ARGUMENT', err.code_name
    assert_match(%r{\Asessiond append to #{Regexp.escape(@project)}/Not/A/Session: .+ \(INVALID_ARGUMENT\)\z}, err.message)
    refute_match(/debug_error_string|\A\d+:/, err.message)
  end

  def test_no_daemon_is_reported_with_what_to_do
    dir = TestSupport.short_tmp('sdrb-none-')
    s = SessiondStore.new(socket_path: File.join(dir, 's.sock'), fold: nil, tries: 2, backoff: [0.05])
    err = assert_raises(SessiondStore::SessiondUnavailableError) { s.load(key) }
    assert_match(/no sessiond socket at #{Regexp.escape(dir)}.*start sessiond/, err.message)
    # A stale socket file, nobody listening.
    srv = UNIXServer.new(File.join(dir, 's.sock'))
    srv.close
    err = assert_raises(SessiondStore::SessiondUnavailableError) { s.load(key) }
    assert_match(/nothing listens on .*start it/, err.message)
  ensure
    FileUtils.rm_rf(dir) if dir
  end

  def test_a_folder_others_may_write_is_refused_before_anything_is_sent
    dir = TestSupport.short_tmp('sdrb-open-')
    File.chmod(0o777, dir)
    path = File.join(dir, 's.sock')
    srv = UNIXServer.new(path)
    s = SessiondStore.new(socket_path: path, fold: nil)
    err = assert_raises(SessiondStore::UntrustedSocketError) { s.append(key, [TestSupport.entry]) }
    assert_match(/may be written by others \(mode 0777\).*Nothing was sent/, err.message)
    assert_nil srv.accept_nonblock(exception: false).then { |c| c == :wait_readable ? nil : c }
  ensure
    srv&.close
    FileUtils.rm_rf(dir) if dir
  end

  # The socket sits in a folder of ours, but the process serving it runs
  # as another user. As root, a child drops to nobody before listen(); as
  # anyone else, the check is asked on behalf of another uid.
  def test_a_socket_served_by_another_user_is_refused
    dir = TestSupport.short_tmp('sdrb-peer-')
    path = File.join(dir, 's.sock')
    if Process.euid.zero?
      reader, writer = IO.pipe
      pid = fork do
        reader.close
        srv = Socket.new(:UNIX, :STREAM)
        srv.bind(Socket.sockaddr_un(path))
        Process::Sys.setgid(65_534)
        Process::Sys.setuid(65_534)
        srv.listen(4)
        writer.puts 'ready'
        sleep 30
      end
      writer.close
      assert_equal "ready\n", reader.gets
      err = assert_raises(SessiondStore::UntrustedSocketError) { SessiondStore::Trust.verify(path) }
      assert_equal 65_534, err.server_uid
      assert_equal pid, err.server_pid
    else
      srv = UNIXServer.new(path)
      err = assert_raises(SessiondStore::UntrustedSocketError) do
        SessiondStore::Trust.check_peer(path, Process.euid + 4242)
      end
      assert_equal Process.euid, err.server_uid
    end
    assert_match(/the process serving it runs as uid \d+ .*neither you .* nor root/, err.message)
  ensure
    if pid
      Process.kill('KILL', pid)
      Process.wait(pid)
    end
    srv&.close
    FileUtils.rm_rf(dir) if dir
  end

  def test_an_empty_subpath_is_the_main_transcript
    s = store
    sid = SecureRandom.uuid
    s.append(key(sid, ''), [TestSupport.entry('main')])
    s.append(key(sid, 'subagents/agent-1'), [TestSupport.entry('sub')])
    assert_equal 1, s.load(key(sid)).length
    assert_equal ['subagents/agent-1'], s.list_subkeys(key(sid, ''))
    s.delete(key(sid, ''))
    assert_nil s.load(key(sid))
    assert_nil s.load(key(sid, 'subagents/agent-1'))
  end

  def test_symbol_keys_are_accepted_and_bad_keys_refused
    s = store
    sid = SecureRandom.uuid
    s.append({ project_key: @project, session_id: sid }, [TestSupport.entry])
    assert_equal 1, s.load({ 'project_key' => @project, 'session_id' => sid }).length
    assert_raises(ArgumentError) { s.load({ 'session_id' => sid }) }
    assert_raises(ArgumentError) { s.append(key, [{ 'n' => Float::NAN }]) }
    assert_raises(ArgumentError) { s.append(key, ['not a hash']) }
  end
end
