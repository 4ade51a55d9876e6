# frozen_string_literal: true

# The committed generated code is what gen.sh makes from api/proto.

require_relative 'helper'

class TestGen < Minitest::Test
  def test_gen_sh_makes_no_diff
    out = TestSupport.short_tmp('sdrb-gen-')
    assert system(File.join(SDK_DIR, 'gen.sh'), out), 'gen.sh failed (it needs grpc_tools_ruby_protoc: ruby-grpc-tools)'
    %w[sessiond_pb.rb sessiond_services_pb.rb].each do |name|
      committed = File.join(SDK_DIR, 'lib', 'sessiond_store', 'gen', name)
      assert_equal File.binread(committed), File.binread(File.join(out, name)),
                   "#{name} is not what gen.sh makes from api/proto: run sdk/ruby/gen.sh and commit"
    end
  ensure
    FileUtils.rm_rf(out) if out
  end
end
