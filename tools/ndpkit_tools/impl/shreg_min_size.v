// Yosys techmap: a fixed-length SRL16E shorter than `SHREG_MIN_SIZE stages becomes the chain of
// FDREs it was made of.  Yosys's xilinx_srl maps every chain of three or more; Vivado's
// `synth_design -shreg_min_size` keeps shorter chains in flip-flops, and the board projects set
// it (ndpkit_tools.boards.resources.SHREG_MIN_SIZE), so the estimate follows the same rule.  Variable
// taps (a non-constant address) and inverted clocks are left alone (_TECHMAP_FAIL_).
(* techmap_celltype = "SRL16E" *)
module _ndpkit_short_srl16e (output Q, input A0, A1, A2, A3, CE, CLK, D);
  parameter [15:0] INIT = 16'h0000;
  parameter [0:0] IS_CLK_INVERTED = 1'b0;
  parameter _TECHMAP_CONSTMSK_A0_ = 0;
  parameter _TECHMAP_CONSTMSK_A1_ = 0;
  parameter _TECHMAP_CONSTMSK_A2_ = 0;
  parameter _TECHMAP_CONSTMSK_A3_ = 0;
  parameter _TECHMAP_CONSTVAL_A0_ = 0;
  parameter _TECHMAP_CONSTVAL_A1_ = 0;
  parameter _TECHMAP_CONSTVAL_A2_ = 0;
  parameter _TECHMAP_CONSTVAL_A3_ = 0;
  localparam FIXED = _TECHMAP_CONSTMSK_A0_ && _TECHMAP_CONSTMSK_A1_ && _TECHMAP_CONSTMSK_A2_ &&
                     _TECHMAP_CONSTMSK_A3_;
  localparam DEPTH = !FIXED ? 1 : 1 + _TECHMAP_CONSTVAL_A0_ + 2 * _TECHMAP_CONSTVAL_A1_ + 4 * _TECHMAP_CONSTVAL_A2_ +
                     8 * _TECHMAP_CONSTVAL_A3_;
  wire _TECHMAP_FAIL_ = !FIXED || IS_CLK_INVERTED || DEPTH >= `SHREG_MIN_SIZE;
  // stage[0] takes D; the SRL's INIT bit i is stage i's initial value
  wire [DEPTH:0] stage;
  assign stage[0] = D;
  genvar i;
  generate
    for (i = 0; i < DEPTH; i = i + 1) begin : ff
      FDRE #(.INIT(INIT[i])) r (.Q(stage[i + 1]), .C(CLK), .CE(CE), .D(stage[i]), .R(1'b0));
    end
  endgenerate
  assign Q = stage[DEPTH];
endmodule
