# frozen_string_literal: true

# The Ruby SDK's store-backed session functions give the same answers over
# SessiondStore as over the SDK's own InMemorySessionStore, on the real
# transcripts in ../shared/fixtures: import, list, info, messages,
# subagents, rename, tag, fork, resume materialization and delete.

require_relative 'helper'

class TestSdkFunctions < Minitest::Test
  UUID = '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}'

  # Lays the fixtures out as Claude Code does under base/projects/<key> and
  # returns the ids of the sessions that have a main transcript.
  def lay_out(base, project_key)
    proj = File.join(base, 'projects', project_key)
    FileUtils.mkdir_p(proj)
    sessions = []
    Dir.glob(File.join(TestSupport::FIXTURES, '*.jsonl')).sort.each do |f|
      name = File.basename(f, '.jsonl')
      m = /\A.*__(#{UUID})(\.TRUNCATED)?(?:__(subagents__.+))?\z/o.match(name)
      next unless m

      sid, truncated, sub = m[1], m[2], m[3]
      dst = sub ? File.join(proj, sid, "#{sub.gsub('__', '/')}.jsonl") : File.join(proj, "#{sid}.jsonl")
      FileUtils.mkdir_p(File.dirname(dst))
      data = File.binread(f)
      # Cut short by its publisher: its last line is half a line.
      data = data[0, data.rindex("\n") + 1] if truncated && !data.end_with?("\n")
      File.binwrite(dst, data)
      sessions << sid unless sub
    end
    sessions.sort
  end

  # What may differ between two correct stores: when they stored a session.
  def strip(value)
    case value
    when Array then value.map { |v| strip(v) }
    when Hash then value.reject { |k, _| %w[last_modified mtime].include?(k.to_s) }.transform_values { |v| strip(v) }
    when ClaudeAgentSDK::SDKSessionInfo, ClaudeAgentSDK::SessionMessage
      strip(value.instance_variables.to_h { |iv| [iv.to_s.delete_prefix('@'), value.instance_variable_get(iv)] })
    else value
    end
  end

  # Rename and tag append entries with a fresh uuid and the time of the
  # call: alike in both stores but for those two fields.
  def fresh_ids_out(entry)
    return entry unless %w[custom-title tag].include?(entry['type'])

    entry.reject { |k, _| %w[uuid timestamp].include?(k) }
  end

  def materialized(store, session_id, directory)
    options = ClaudeAgentSDK::ClaudeAgentOptions.new(session_store: store, resume: session_id, cwd: directory)
    m = ClaudeAgentSDK::SessionResume.materialize_resume_session(options)
    refute_nil m
    begin
      Dir.glob('**/*.jsonl', base: m.config_dir).sort.to_h do |rel|
        lines = File.readlines(File.join(m.config_dir, rel), chomp: true).map { |l| fresh_ids_out(JSON.parse(l)) }
        [rel, lines]
      end
    ensure
      m.cleanup
    end
  end

  def answers(store, sessions, directory)
    sdk = ClaudeAgentSDK
    out = {}
    sessions.each { |sid| sdk.import_session_to_store(session_id: sid, session_store: store, directory: directory) }
    out['list'] = sdk.list_sessions_from_store(session_store: store, directory: directory).sort_by(&:session_id)
    sessions.each do |sid|
      out["info #{sid}"] = sdk.get_session_info_from_store(session_store: store, session_id: sid, directory: directory)
      out["messages #{sid}"] = sdk.get_session_messages_from_store(session_store: store, session_id: sid,
                                                                   directory: directory)
      agents = sdk.list_subagents_from_store(session_store: store, session_id: sid, directory: directory).sort
      out["subagents #{sid}"] = agents
      agents.each do |a|
        out["agent #{sid} #{a}"] = sdk.get_subagent_messages_from_store(session_store: store, session_id: sid,
                                                                        agent_id: a, directory: directory)
      end
    end
    first = sessions.first
    sdk.rename_session_via_store(session_store: store, session_id: first, title: 'renamed by the test',
                                 directory: directory)
    sdk.tag_session_via_store(session_store: store, session_id: first, tag: 'kit', directory: directory)
    out['info after rename and tag'] = sdk.get_session_info_from_store(session_store: store, session_id: first,
                                                                        directory: directory)
    out['list after rename and tag'] = sdk.list_sessions_from_store(session_store: store, directory: directory)
                                          .sort_by(&:session_id)
    forked = sdk.fork_session_via_store(session_store: store, session_id: first, directory: directory, title: 'forked')
    fork_messages = sdk.get_session_messages_from_store(session_store: store, session_id: forked.session_id,
                                                        directory: directory)
    # A fork's ids are fresh: compare its shape, not its uuids.
    out['fork'] = fork_messages.map { |m| [m.type, m.parent_tool_use_id] }
    out['fork title'] = sdk.get_session_info_from_store(session_store: store, session_id: forked.session_id,
                                                        directory: directory)&.custom_title
    out["materialized #{first}"] = materialized(store, first, directory)
    sdk.delete_session_via_store(session_store: store, session_id: first, directory: directory)
    out['after delete'] = sdk.list_sessions_from_store(session_store: store, directory: directory).map do |s|
      s.session_id == forked.session_id ? '<the fork>' : s.session_id
    end.sort
    out['info after delete'] = sdk.get_session_info_from_store(session_store: store, session_id: first,
                                                                directory: directory)
    out
  end

  def test_store_functions_match_the_in_memory_store
    TestSupport.load_sdk
    daemon = TestSupport.shared_daemon
    base = TestSupport.short_tmp('sdrb-fx-')
    work = File.join(base, 'work')
    FileUtils.mkdir_p(work)
    sessions = lay_out(File.join(base, 'config'), ClaudeAgentSDK::Sessions.project_key_for_directory(work))
    assert_operator sessions.length, :>=, 3
    saved = ENV['CLAUDE_CONFIG_DIR']
    ENV['CLAUDE_CONFIG_DIR'] = File.join(base, 'config')
    begin
      mem = answers(ClaudeAgentSDK::InMemorySessionStore.new, sessions, work)
      store = SessiondStore.new(socket_path: daemon.socket)
      ours = answers(store, sessions, work)
      # The listings went through the summaries sessiond kept, folded by
      # the SDK's fold at each append: every session left has one.
      summarised = store.list_session_summaries(ClaudeAgentSDK::Sessions.project_key_for_directory(work))
      store.close
    ensure
      ENV['CLAUDE_CONFIG_DIR'] = saved
      FileUtils.rm_rf(base)
    end
    assert_equal mem.keys.sort, ours.keys.sort
    mem.each_key do |k|
      if mem[k].nil?
        assert_nil ours[k], k
      else
        assert_equal strip(mem[k]), strip(ours[k]), k
      end
    end
    assert_equal sessions.length, summarised.length, 'the sessions left after the delete, and the fork'
    # The comparison saw the fixtures' contents, not empty answers.
    sessions.each { |s| refute_empty mem["messages #{s}"], s }
    assert(sessions.any? { |s| !mem["subagents #{s}"].empty? })
    assert_equal sessions.length, mem['list'].length
    assert_equal 'renamed by the test', mem['info after rename and tag'].custom_title
    assert_equal 'kit', mem['info after rename and tag'].tag
  end
end
