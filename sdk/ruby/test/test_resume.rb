# frozen_string_literal: true

# Seed 003's flow end to end: the Ruby SDK's SessionResume loads a session
# from sessiond (through SessiondStore) into a temporary CLAUDE_CONFIG_DIR
# laid out like ~/.claude, subagent transcripts and their .meta.json
# included, for the CLI to resume from; and removes that folder when a store
# call fails halfway.

require_relative 'helper'

class TestResume < Minitest::Test
  SESSION = '8463c716-a2ea-4c14-9efa-87158ebd9f20'
  AGENTS = %w[agent-a7be2f0 agent-acompact-f46190].freeze

  def setup
    TestSupport.load_sdk
    @daemon = TestSupport::Daemon.start('sdrb-resume-')
    @work = TestSupport.short_tmp('sdrb-work-')
    # The agent's own config folder, empty: nothing of the user's real
    # ~/.claude (credentials) is copied into the materialized folder.
    @config = TestSupport.short_tmp('sdrb-cfg-')
    @project_key = ClaudeAgentSDK::Sessions.project_key_for_directory(@work)
  end

  def teardown
    code = @daemon.stop
    @daemon.remove
    FileUtils.rm_rf([@work, @config])
    assert_equal 0, code, "sessiond exited with #{code} on SIGTERM (log in #{@daemon.base})"
  end

  # A fixture's entries; the truncated one ends in half a line, left out.
  def fixture(name)
    File.foreach(File.join(TestSupport::FIXTURES, name), encoding: 'UTF-8').filter_map do |line|
      JSON.parse(line)
    rescue JSON::ParserError
      nil
    end
  end

  def options(store, **kw)
    ClaudeAgentSDK::ClaudeAgentOptions.new(session_store: store, cwd: @work,
                                           env: { 'CLAUDE_CONFIG_DIR' => @config }, **kw)
  end

  def read_jsonl(path)
    File.readlines(path, chomp: true, encoding: 'UTF-8').map { |l| JSON.parse(l) }
  end

  def store_session(store)
    main = fixture("marot__spotter__#{SESSION}.TRUNCATED.jsonl")
    agents = AGENTS.to_h { |a| [a, fixture("marot__spotter__#{SESSION}__subagents__#{a}.jsonl")] }
    # In batches, as the mirror sends them.
    main.each_slice(100) { |batch| store.append(TestSupport.key(@project_key, SESSION), batch) }
    agents.each do |a, entries|
      store.append(TestSupport.key(@project_key, SESSION, "subagents/#{a}"), entries)
    end
    # What a live mirror sends for a subagent's .meta.json sidecar.
    meta = { 'type' => 'agent_metadata', 'agentType' => 'general-purpose', 'description' => 'explore the repo' }
    store.append(TestSupport.key(@project_key, SESSION, 'subagents/agent-a7be2f0'), [meta])
    [main, agents, meta]
  end

  def test_resume_materializes_the_session_and_its_subagents_from_sessiond
    store = SessiondStore.new(socket_path: @daemon.socket)
    main, agents, meta = store_session(store)
    assert_operator main.length, :>, 800
    m = ClaudeAgentSDK::SessionResume.materialize_resume_session(options(store, resume: SESSION))
    refute_nil m, 'a session in the store must be materialized'
    begin
      assert_equal SESSION, m.resume_session_id
      project_dir = File.join(m.config_dir, 'projects', @project_key)
      main_file = File.join(project_dir, "#{SESSION}.jsonl")
      assert_equal main, read_jsonl(main_file)
      assert_equal 0o600, File.stat(main_file).mode & 0o777
      AGENTS.each do |a|
        assert_equal agents[a], read_jsonl(File.join(project_dir, SESSION, 'subagents', "#{a}.jsonl")), a
      end
      meta_file = File.join(project_dir, SESSION, 'subagents', 'agent-a7be2f0.meta.json')
      assert_equal meta.except('type'), JSON.parse(File.read(meta_file))
      refute File.exist?(File.join(project_dir, SESSION, 'subagents', 'agent-acompact-f46190.meta.json'))
      files = Dir.glob('**/*', base: m.config_dir).select { |p| File.file?(File.join(m.config_dir, p)) }.sort
      assert_equal ["projects/#{@project_key}/#{SESSION}.jsonl",
                    "projects/#{@project_key}/#{SESSION}/subagents/agent-a7be2f0.jsonl",
                    "projects/#{@project_key}/#{SESSION}/subagents/agent-a7be2f0.meta.json",
                    "projects/#{@project_key}/#{SESSION}/subagents/agent-acompact-f46190.jsonl"], files

      resumed = ClaudeAgentSDK::SessionResume.apply_materialized_options(options(store, resume: SESSION), m)
      assert_equal m.config_dir, resumed.env['CLAUDE_CONFIG_DIR']
    ensure
      m.cleanup
    end
    refute File.exist?(m.config_dir), 'cleanup removes the materialized folder'
  ensure
    store&.close
  end

  def test_continue_resumes_the_newest_session_that_is_not_a_sidechain
    store = SessiondStore.new(socket_path: @daemon.socket)
    older = SecureRandom.uuid
    newer_sidechain = SecureRandom.uuid
    conversation = fixture('marot__spotter__short.jsonl')
    store.append(TestSupport.key(@project_key, older), conversation)
    sleep 0.01 # a later mtime for the sidechain
    store.append(TestSupport.key(@project_key, newer_sidechain),
                 [TestSupport.entry('side', 'isSidechain' => true)])
    m = ClaudeAgentSDK::SessionResume.materialize_resume_session(options(store, continue_conversation: true))
    refute_nil m
    begin
      assert_equal older, m.resume_session_id
      assert_equal conversation, read_jsonl(File.join(m.config_dir, 'projects', @project_key, "#{older}.jsonl"))
    ensure
      m.cleanup
    end
  ensure
    store&.close
  end

  def test_resume_of_a_session_sessiond_does_not_hold_materializes_nothing
    store = SessiondStore.new(socket_path: @daemon.socket)
    assert_nil ClaudeAgentSDK::SessionResume.materialize_resume_session(options(store, resume: SecureRandom.uuid))
  ensure
    store&.close
  end

  # The daemon stops after the main transcript was loaded: listing the
  # subagents fails, the SDK raises, and the half-written folder (already
  # holding the main transcript) is gone.
  class StopsTheDaemonAfterLoad < SessiondStore
    attr_accessor :daemon

    def load(key)
      entries = super
      daemon.stop
      entries
    end
  end

  def test_a_failure_halfway_leaves_no_materialized_folder
    tmp = TestSupport.short_tmp('sdrb-tmpdir-')
    saved = ENV['TMPDIR']
    ENV['TMPDIR'] = tmp # where Dir.mktmpdir makes the SDK's claude-resume-* folder
    store = SessiondStore.new(socket_path: @daemon.socket)
    store_session(store)
    store.close
    failing = StopsTheDaemonAfterLoad.new(socket_path: @daemon.socket, tries: 1)
    failing.daemon = @daemon
    err = assert_raises(RuntimeError) do
      ClaudeAgentSDK::SessionResume.materialize_resume_session(options(failing, resume: SESSION))
    end
    assert_match(/SessionStore#list_subkeys .* failed during resume materialization/, err.message)
    # What the adapter said, inside the SDK's message: where and what to do.
    assert_match(/#{Regexp.escape(@daemon.socket)}.*start (sessiond|it)/, err.message)
    refute_match(/debug_error_string|failed to connect to all addresses/, err.message)
    assert_equal [], Dir.children(tmp), 'the materialized folder was removed on failure'
  ensure
    ENV['TMPDIR'] = saved
    FileUtils.rm_rf(tmp) if tmp
  end
end
